"""JobSpec rules and the trainer's JSON-line protocol as the launcher reads it."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from skills.training_job_deployer.job_spec import DNS1123_LABEL, JobSpec
from skills.training_job_deployer.trainer_log import RunMetrics, parse_events, parse_line

LABEL = re.compile(DNS1123_LABEL)


@given(st.from_regex(r"\A[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z"))
def test_every_dns1123_label_is_a_valid_job_name(name):
    assert JobSpec(job_name=name).job_name == name


@given(st.text(max_size=70))
def test_a_job_name_is_accepted_exactly_when_it_is_a_dns1123_label(name):
    valid = bool(LABEL.fullmatch(name)) and len(name) <= 63
    try:
        JobSpec(job_name=name)
        accepted = True
    except ValidationError:
        accepted = False
    assert accepted == valid


@pytest.mark.parametrize(
    "bad",
    [
        {"num_nodes": 0},
        {"gpu_per_node": 0},
        {"max_steps": 0},
        {"learning_rate": 0},
        {"sharding_strategy": "zero3"},
        {"model_type": "../etc"},
        {"unknown": 1},
    ],
)
def test_out_of_range_fields_are_rejected(bad):
    with pytest.raises(ValidationError):
        JobSpec(job_name="j", **bad)


def test_trainer_args_pass_only_what_was_set():
    spec = JobSpec(job_name="j", max_steps=5, seq_len=64)
    assert spec.trainer_args() == [
        "--model_type",
        "debug",
        "--max_steps",
        "5",
        "--seq_len",
        "64",
        "--sharding_strategy",
        "full",
        "--seed",
        "0",
    ]


@pytest.mark.parametrize(
    "line",
    [
        "",
        "plain text",
        "{not json",
        '{"no_event": 1}',
        "[1, 2]",
        '{"event": 3}',
        'W1122 torch warning {"event": "step"}',
    ],
)
def test_non_events_are_ignored(line):
    assert parse_line(line) is None


def test_metrics_add_up_a_run():
    lines = [
        {"event": "start", "world_size": 2, "max_steps": 3},
        {"event": "step", "step": 1, "loss": 6.0, "tokens_per_s": 10.0},
        {"event": "step", "step": 3, "loss": 4.5, "tokens_per_s": 30.0},
        {"event": "summary", "steps": 3, "tokens_per_s": 25.0},
    ]
    text = "noise\n" + "\n".join(json.dumps(x) for x in lines) + "\n"
    metrics = RunMetrics()
    for event in parse_events(text):
        metrics.add(event)
    assert (metrics.world_size, metrics.max_steps, metrics.steps) == (2, 3, 3)
    assert (metrics.first_loss, metrics.last_loss, metrics.tokens_per_s) == (6.0, 4.5, 25.0)
    assert metrics.summary is not None and metrics.error is None
    assert metrics.progress_message() == "loss 4.5000 · 25 tok/s"
