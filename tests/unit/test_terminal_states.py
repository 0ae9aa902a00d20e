"""One definition of "ended" per state machine: jobs (with preempted) and operations."""

from __future__ import annotations

from typing import get_args

from skills.operations import operation_state
from skills.training_job_deployer import models


def test_job_terminal_statuses_are_job_statuses() -> None:
    assert set(models.TERMINAL) <= set(get_args(models.JobStatus))
    assert set(models.TERMINAL) == {"succeeded", "failed", "preempted", "cancelled"}


def test_operation_terminal_statuses_are_operation_statuses() -> None:
    assert set(operation_state.TERMINAL) <= set(get_args(operation_state.OperationStatus))
    # every status but running: an operation is never preempted (its worker is ours)
    assert set(get_args(operation_state.OperationStatus)) - set(operation_state.TERMINAL) == {
        "running"
    }
