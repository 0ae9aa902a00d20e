"""A failed job's hint names a next step the job's target has: the pod doctor
(diagnose_training_job) reads a cluster's pods only, so a local or Slurm failure is
pointed at its error line, its log and auto_retry instead."""

from __future__ import annotations

import pytest

from skills.training_job_deployer.models import JobState

CONFIG_ERROR = {"error_type": "ConfigError", "message": "seq_len", "retryable": False}
CRASH = {"error_type": "RuntimeError", "message": "boom", "retryable": True}


def _hint(target: str, error: dict | None) -> str:
    state = JobState(job_name="j", target=target, status="failed", error=error)
    failure = state.job_failure()
    assert failure is not None and failure.code == "job_failed"
    return failure.hint


@pytest.mark.parametrize("error", [CONFIG_ERROR, CRASH, None])
def test_a_cluster_job_is_sent_to_the_pod_doctor(error):
    assert _hint("kubernetes", error).startswith("diagnose_training_job")


@pytest.mark.parametrize("target", ["local", "slurm"])
def test_a_configuration_error_on_a_host_says_change_it_not_diagnose(target):
    hint = _hint(target, CONFIG_ERROR)
    assert "diagnose_training_job" not in hint and hint.startswith("Change what the error names")


@pytest.mark.parametrize("target", ["local", "slurm"])
def test_a_crash_on_a_host_points_at_the_log_and_auto_retry(target):
    for error in (CRASH, None):
        hint = _hint(target, error)
        assert "diagnose_training_job" not in hint and "auto_retry=true" in hint
