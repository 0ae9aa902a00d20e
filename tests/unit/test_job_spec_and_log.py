"""JobSpec rules and the trainer's JSON-line protocol as the launcher reads it."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from skills.training_job_deployer.job_spec import DNS1123_LABEL, TRAINER_FIELDS, JobSpec
from skills.training_job_deployer.trainer_log import (
    RunMetrics,
    parse_events,
    parse_line,
    tail_with_error,
)

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
        {"grad_accum_steps": 0},
        {"activation_checkpointing": "some"},
        {"cpu_offload": "maybe"},
        {"checkpoint_freq": -1},
        {"keep_last": -1},
        {"async_save": "later"},
        {"validation_freq": -1},
        {"max_restarts": -1},
        {"checkpoint_dir": "gs://bucket/ckpt"},
        {"checkpoint_dir": "s3://"},
        {"checkpoint_dir": "s3://Bad_Bucket/x"},
        {"checkpoint_dir": "--resume=false"},
        {"checkpoint_dir": ""},
        {"model_name_or_path": "https://example.com/model"},
        {"dataset": "data\n--seed 3"},
        {"tokenizer": " tok"},
        {"dataset_config_name": "a b"},
    ],
)
def test_out_of_range_fields_are_rejected(bad):
    with pytest.raises(ValidationError):
        JobSpec(job_name="j", **bad)


@pytest.mark.parametrize(
    "good",
    [
        {"checkpoint_dir": "s3://my-bucket"},
        {"checkpoint_dir": "s3://my-bucket/runs/j/ckpt"},
        {"checkpoint_dir": "/mnt/fsx/ckpt"},
        {"checkpoint_dir": "relative/dir with space"},
        {"model_name_or_path": "s3://models/llama-3.2-1b"},
        {"dataset": "roneneldan/TinyStories", "dataset_config_name": "wikitext-2-raw-v1"},
        {"tokenizer": "meta-llama/Llama-3.2-1B"},
        {"checkpoint_freq": 0, "keep_last": 0, "validation_freq": 0, "max_restarts": 0},
    ],
)
def test_valid_new_fields_are_accepted(good):
    spec = JobSpec(job_name="j", **good)
    assert {k: getattr(spec, k) for k in good} == good


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
        "auto",
        "--seed",
        "0",
    ]


def test_trainer_args_render_every_field_in_order():
    spec = JobSpec(
        job_name="j",
        model_type="llama_v3_1b",
        model_name_or_path="s3://models/llama-3.2-1b",
        max_steps=100,
        train_batch_size=4,
        seq_len=512,
        dataset="s3://data/corpus/",
        dataset_config_name="default",
        tokenizer="/tok/tokenizer.json",
        learning_rate=3e-4,
        grad_accum_steps=2,
        sharding_strategy="hybrid",
        activation_checkpointing="selective",
        cpu_offload=True,
        checkpoint_dir="s3://ckpt/j",
        checkpoint_freq=0,
        keep_last=3,
        async_save=False,
        validation_freq=25,
        seed=7,
        max_restarts=2,
    )
    args = spec.trainer_args()
    assert args == [
        "--model_type", "llama_v3_1b",
        "--model_name_or_path", "s3://models/llama-3.2-1b",
        "--max_steps", "100",
        "--train_batch_size", "4",
        "--seq_len", "512",
        "--dataset", "s3://data/corpus/",
        "--dataset_config_name", "default",
        "--tokenizer", "/tok/tokenizer.json",
        "--learning_rate", "0.0003",
        "--grad_accum_steps", "2",
        "--sharding_strategy", "hybrid",
        "--activation_checkpointing", "selective",
        "--cpu_offload", "true",
        "--checkpoint_dir", "s3://ckpt/j",
        "--checkpoint_freq", "0",
        "--keep_last", "3",
        "--async_save", "false",
        "--validation_freq", "25",
        "--seed", "7",
    ]  # fmt: skip
    # max_restarts is torchrun's flag (see the local target's plan), not the trainer's.
    assert "--max_restarts" not in args and "--max-restarts" not in args


@pytest.mark.parametrize(("value", "text"), [(True, "true"), (False, "false")])
@pytest.mark.parametrize("name", ["cpu_offload", "async_save"])
def test_bools_are_rendered_as_true_and_false(name, value, text):
    args = JobSpec(job_name="j", **{name: value}).trainer_args()
    assert args[args.index(f"--{name}") + 1] == text


def test_new_fields_left_none_are_omitted():
    args = JobSpec(job_name="j").trainer_args()
    for name in TRAINER_FIELDS:
        if getattr(JobSpec(job_name="j"), name) is None:
            assert f"--{name}" not in args


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


def metrics_of(*events: dict) -> RunMetrics:
    metrics = RunMetrics()
    for event in parse_events("\n".join(json.dumps(e) for e in events)):
        metrics.add(event)
    return metrics


START = {"event": "start", "world_size": 2, "max_steps": 10, "resumed_from": None}
STEP = {"event": "step", "step": 4, "loss": 5.0, "tokens_per_s": 10.0}
SAVED = {
    "event": "checkpoint_saved",
    "step": 4,
    "path": "/runs/j/checkpoints/step-4",
    "async": False,
    "blocked_s": 0.1,
}


def test_eval_lines_give_the_last_eval_loss():
    evals = [
        {"event": "eval", "step": step, "loss": loss, "perplexity": 1.0}
        for step, loss in [(5, 4.0), (10, 3.25)]
    ]
    assert metrics_of(START, *evals).last_eval_loss == 3.25


def test_checkpoint_saved_gives_the_last_checkpoint():
    later = {**SAVED, "step": 8, "path": "s3://b/j/step-8", "async": True}
    metrics = metrics_of(START, STEP, SAVED, later)
    assert (metrics.checkpoint_step, metrics.checkpoint_path) == (8, "s3://b/j/step-8")


def test_resume_comes_from_the_start_and_checkpoint_loaded_lines():
    loaded = {"event": "checkpoint_loaded", "step": 6, "path": "/c/step-6", "seconds": 0.5}
    assert metrics_of(loaded).resumed_from == 6
    metrics = metrics_of(loaded, {**START, "resumed_from": 6})
    # Progress starts where the run resumed, not at 0.
    assert (metrics.resumed_from, metrics.steps) == (6, 6)
    assert metrics.progress_message() == "resumed from step 6"
    assert metrics_of(START).resumed_from is None


def test_checkpoint_skipped_lines_are_collected():
    skipped = {"event": "checkpoint_skipped", "path": "/c/step-9", "reason": "no COMPLETE marker"}
    assert metrics_of(skipped).skipped_checkpoints == ["/c/step-9"]


def test_summary_fills_eval_loss_resume_and_checkpoint():
    summary = {
        "event": "summary",
        "steps": 10,
        "first_loss": 5.0,
        "last_loss": 4.0,
        "tokens_per_s": 12.0,
        "elapsed_s": 1.0,
        "world_size": 2,
        "resumed_from": 6,
        "last_eval_loss": 3.5,
        "checkpoint": "/c/step-10",
    }
    metrics = metrics_of(START, summary)
    assert (metrics.last_eval_loss, metrics.resumed_from, metrics.checkpoint_path) == (
        3.5,
        6,
        "/c/step-10",
    )
    assert metrics.outcome(0) is None


def test_preempted_with_a_checkpoint_says_where_a_rerun_resumes():
    preempted = {"event": "preempted", "step": 4, "signal": 15, "checkpoint": SAVED["path"]}
    metrics = metrics_of(START, STEP, SAVED, preempted)
    assert metrics.preempted == preempted
    message = "preempted: checkpoint saved at step 4; re-run the same job to resume"
    assert metrics.outcome(143) == metrics.outcome(1) == metrics.outcome(None) == message


def test_exit_143_without_a_preempted_line_is_still_preempted():
    assert metrics_of(START, STEP, SAVED).outcome(143) == (
        "preempted: checkpoint saved at step 4; re-run the same job to resume"
    )
    assert metrics_of(START, STEP).outcome(143) == (
        "preempted without a checkpoint; a re-run starts over"
    )


def test_preempted_without_a_checkpoint_says_so():
    preempted = {"event": "preempted", "step": 3, "signal": 15, "checkpoint": None}
    assert metrics_of(START, preempted).outcome(143) == (
        "preempted at step 3 without a checkpoint; a re-run starts over"
    )
    resumed = {**START, "resumed_from": 2}
    assert metrics_of(resumed, preempted).outcome(143) == (
        "preempted at step 3 without a new checkpoint; re-running the same job resumes from step 2"
    )


def test_failed_runs_say_why():
    error = {"event": "error", "error_type": "NonFiniteLossError", "message": "nan at step 3"}
    assert metrics_of(START, error).outcome(1) == "failed: NonFiniteLossError: nan at step 3"
    assert metrics_of(START, STEP).outcome(-9) == (
        "failed: the trainer stopped with exit code -9 before its summary line; see the log tail"
    )
    summary = {"event": "summary", "steps": 4}
    assert "exit code 1 after" in metrics_of(START, summary).outcome(1)


def test_a_restart_by_torchrun_starts_a_new_attempt():
    error = {"event": "error", "error_type": "RuntimeError", "message": "NCCL timeout"}
    preempted = {"event": "preempted", "step": 4, "signal": 15, "checkpoint": SAVED["path"]}
    summary = {"event": "summary", "steps": 10, "tokens_per_s": 9.0}
    metrics = metrics_of(
        START, STEP, SAVED, preempted, error, {**START, "resumed_from": 4}, summary
    )
    assert metrics.error is None and metrics.preempted is None
    assert metrics.first_loss == 5.0 and metrics.checkpoint_step == 4
    assert metrics.outcome(0) is None


def test_a_failed_tail_that_lost_the_error_line_leads_with_the_error():
    error = {"event": "error", "error_type": "ConfigError", "message": "seq_len 4096 > max_seq_len"}
    teardown = "Traceback (most recent call last):\nSignalException: Process 1 got signal: 15"
    assert tail_with_error(teardown, error) == (
        "ConfigError: seq_len 4096 > max_seq_len\n[...]\n" + teardown
    )
    # A tail that still holds it, no error, or no tail at all: as it is.
    kept = '{"event": "error", "message": "seq_len 4096 > max_seq_len"}\n' + teardown
    assert tail_with_error(kept, error) == kept
    assert tail_with_error(teardown, None) == teardown
    assert tail_with_error(None, error) is None
