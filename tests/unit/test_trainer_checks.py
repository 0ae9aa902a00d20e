"""A dry run refuses what the trainer would refuse at start (issue 46): the trainer's own
rules (trainer/config.py, config_loader.py, hf_config.py, no torch) run when the job is
planned, on every target; what lies on another host is left to the trainer there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from commands.deploy_training_job import deploy_training_job
from skills.shared.errors import ToolFailure
from skills.shared.paths import WORKING_DIR
from skills.training_job_deployer.targets.by_name import TARGETS

ROOT = Path(__file__).resolve().parents[2]


def _settings(target: str, tmp_path: Path) -> dict[str, Any]:
    if target == "kubernetes":
        return {"target": target, "image_uri": "registry.example/trainer:1"}
    return {"target": target, "runs_dir": str(tmp_path / "runs")}


def _refusal(target: str, tmp_path: Path, **job: Any) -> str | None:
    """The dry run's invalid_input message, or None when it plans."""
    try:
        deploy_training_job(job_name="check", dry_run=True, **job, **_settings(target, tmp_path))
    except ToolFailure as failure:
        assert failure.code == "invalid_input" and failure.hint
        return failure.message
    return None


def _checkpoint(tmp_path: Path, positions: int) -> Path:
    hf = tmp_path / "hf"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300,
        "intermediate_size": 96, "max_position_embeddings": positions,
    }))  # fmt: skip
    return hf


@pytest.mark.parametrize("target", list(TARGETS))
def test_a_seq_len_above_the_presets_limit_is_refused_on_every_target(target, tmp_path):
    said = _refusal(target, tmp_path, model_type="debug", seq_len=1024)
    assert said is not None and "seq_len 1024 exceeds max_seq_len 512" in said
    assert _refusal(target, tmp_path, model_type="debug", seq_len=512) is None


@pytest.mark.parametrize("target", ["local", "slurm"])  # the job's paths are this host's
def test_a_local_checkpoints_max_position_embeddings_bounds_seq_len(target, tmp_path):
    hf = str(_checkpoint(tmp_path, positions=64))
    said = _refusal(target, tmp_path, model_name_or_path=hf, seq_len=128)
    assert said is not None and "seq_len 128 exceeds max_seq_len 64" in said
    assert _refusal(target, tmp_path, model_name_or_path=hf, seq_len=64) is None


@pytest.mark.parametrize("target", ["local", "slurm"])
@pytest.mark.parametrize(
    ("field", "value"),
    [("dataset", "data/train.jsonl"), ("dataset", "./corpus"), ("tokenizer", "tok.json"),
     ("model_name_or_path", "./checkpoints/hf")],
)  # fmt: skip
def test_a_local_path_that_is_not_there_is_refused(target, field, value, tmp_path):
    said = _refusal(target, tmp_path, **{field: value})
    # Said as the path it looked at: under the caller's project.
    where = Path.cwd() / value
    assert said is not None and f"{field} '{where}' does not exist" in said


def test_paths_on_the_cluster_and_hub_ids_are_left_to_the_job(tmp_path):
    assert _refusal("kubernetes", tmp_path, dataset="/fsx/data/train.jsonl") is None
    assert _refusal("local", tmp_path, dataset="allenai/c4", model_name_or_path="org/m") is None
    assert _refusal("local", tmp_path, dataset="s3://bucket/data.jsonl") is None


def test_a_trainer_variable_in_the_jobs_env_is_checked_as_the_trainer_would(tmp_path):
    said = _refusal("kubernetes", tmp_path, env={"TRAINER_MAX_STEPZ": "3"})
    assert said is not None and "did you mean 'TRAINER_MAX_STEPS'" in said


def test_the_rules_the_tools_run_import_no_torch():
    code = (
        "import sys; import skills.training_job_deployer.trainer_checks; "
        "print('torch' in sys.modules, 'transformers' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert done.stdout.split() == ["False", "False"]


def test_cpu_offload_on_a_host_without_gpus_is_planned_it_runs_the_offload_path_on_cpu(
    tmp_path, monkeypatch
):
    # The trainer runs it (gloo for the CPU-side tensors, the CPU optimizer: what a GPU
    # run does with them), so a CPU host can train and test it; it saves no memory there.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # this host's GPUs: none visible
    assert _refusal("local", tmp_path, cpu_offload=True) is None
    assert _refusal("kubernetes", tmp_path, cpu_offload=True) is None  # the nodes' GPUs


def test_a_relative_path_is_looked_for_in_the_callers_project_not_the_servers_cwd(tmp_path):
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "data" / "train.jsonl").write_text('{"text": "hello"}\n')
    token = WORKING_DIR.set(project)  # an MCP session's workspace; the cwd is elsewhere
    try:
        assert _refusal("local", tmp_path, dataset="data/train.jsonl") is None
        said = _refusal("local", tmp_path, dataset="data/other.jsonl")
    finally:
        WORKING_DIR.reset(token)
    assert said is not None and f"'{project / 'data/other.jsonl'}' does not exist" in said


def test_float8_reaches_a_job_through_env_and_a_host_without_gpus_is_refused_it(
    tmp_path, monkeypatch
):
    # TRAINER_FLOAT8 (the trainer's flag, no JobSpec field: no bytes in tools/list).
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    said = _refusal("local", tmp_path, env={"TRAINER_FLOAT8": "true"})
    assert said is not None and "float8 needs a GPU with float8 tensor cores" in said
    assert _refusal("kubernetes", tmp_path, env={"TRAINER_FLOAT8": "true"}) is None
    said = _refusal("kubernetes", tmp_path, env={"TRAINER_FLOAT8": "maybe"})
    assert said is not None and "TRAINER_FLOAT8" in said


@pytest.mark.parametrize("target", list(TARGETS))
def test_every_targets_dry_run_says_where_async_saves_stage_and_the_backends(target, tmp_path):
    planned = deploy_training_job(
        job_name="staging", dry_run=True, model_type="llama_v3_8b", cpu_offload=True,
        **_settings(target, tmp_path),
    )  # fmt: skip
    rows = dict(planned.summary_rows())
    assert rows["async save"] == planned.plan.async_save
    assert rows["backend"] == planned.plan.process_group
    if target == "kubernetes":  # GPU nodes: 12 B a parameter of the one process's copy
        assert planned.plan.async_save.startswith("on: 89.7 GiB staged per node in /dev/shm")
        assert planned.plan.process_group == "cuda:nccl,cpu:gloo"
