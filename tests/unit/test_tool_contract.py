"""The tool contract: one typed function -> input model, CLI flags and MCP schema."""

from __future__ import annotations

import json
import os

import pytest

from commands import all_tools
from commands._cli import build_parser, run_cli
from commands.deploy_training_job import deploy_training_job
from skills.shared.errors import ToolFailure
from skills.shared.tooling import spec_of


def test_registry_lists_every_tool_with_its_gates():
    specs = {spec.name: spec for spec in all_tools()}
    assert set(specs) == {
        "deploy_training_job",
        "get_training_job",
        "get_training_job_logs",
        "diagnose_training_job",
        "list_training_jobs",
        "cancel_training_job",
        "delete_training_job",
        "get_operation",
        "list_operations",
        "cancel_operation",
        "build_image",
        "setup_codebuild",
        "start_codebuild",
        "get_codebuild_build",
        "push_to_ecr",
        "manage_eks_cluster",
        "inspect_eks_cluster",
        "deploy_model_server",
        "get_model_server",
        "list_model_servers",
        "delete_model_server",
        "transfer_job_artifacts",
    }
    assert specs["get_training_job"].read_only and specs["get_training_job_logs"].read_only
    assert specs["diagnose_training_job"].read_only
    assert specs["cancel_training_job"].destructive
    assert specs["delete_training_job"].destructive
    assert not specs["deploy_training_job"].read_only
    assert specs["list_training_jobs"].read_only and specs["list_operations"].read_only
    assert specs["get_operation"].read_only and specs["cancel_operation"].destructive
    # The cluster's reads are served read-only; its writes are destructive, gated by confirm.
    assert specs["inspect_eks_cluster"].read_only and specs["inspect_eks_cluster"].idempotent
    assert specs["manage_eks_cluster"].destructive
    assert "validate_components" not in specs["manage_eks_cluster"].params.model_fields
    assert specs["get_model_server"].read_only and specs["list_model_servers"].read_only
    assert specs["delete_model_server"].destructive and specs["deploy_model_server"].long
    # Overwrites local files (with confirm) and publishes to the Hub: a gated write.
    assert specs["transfer_job_artifacts"].destructive


def test_input_model_comes_from_the_signature():
    params = spec_of(deploy_training_job).params
    assert "progress" not in params.model_fields
    assert params.model_fields["job_name"].is_required()
    assert params.model_fields["target"].default == "local"
    assert "DNS-1123" in params.model_fields["job_name"].description


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"job_name": "Bad_Name"}, "job_name"),
        ({"job_name": "ok", "num_nodes": 0}, "num_nodes"),
        ({"job_name": "ok", "target": "mars"}, "target"),
        ({"job_name": "ok", "max_steps": "many"}, "max_steps"),
        ({"job_name": "ok", "no_such_flag": 1}, "no_such_flag"),
        ({}, "job_name"),
        ({"job_name": "ok", "grad_accum_steps": 0}, "grad_accum_steps"),
        ({"job_name": "ok", "activation_checkpointing": "most"}, "activation_checkpointing"),
        ({"job_name": "ok", "cpu_offload": "sometimes"}, "cpu_offload"),
        ({"job_name": "ok", "checkpoint_dir": "gs://b/ck"}, "checkpoint_dir"),
        ({"job_name": "ok", "checkpoint_freq": -1}, "checkpoint_freq"),
        ({"job_name": "ok", "keep_last": -2}, "keep_last"),
        ({"job_name": "ok", "async_save": "soon"}, "async_save"),
        ({"job_name": "ok", "validation_freq": -5}, "validation_freq"),
        ({"job_name": "ok", "max_restarts": -1}, "max_restarts"),
        ({"job_name": "ok", "dataset": "-x"}, "dataset"),
        ({"job_name": "ok", "dataset_config_name": "a/b"}, "dataset_config_name"),
        ({"job_name": "ok", "tokenizer": ""}, "tokenizer"),
        ({"job_name": "ok", "model_name_or_path": "hf://m"}, "model_name_or_path"),
    ],
)
def test_bad_input_is_a_coded_failure_naming_the_field(args, field):
    with pytest.raises(ToolFailure) as caught:
        deploy_training_job(**args)
    failure = caught.value
    assert failure.code == "invalid_input"
    assert failure.hint
    assert field in [p["field"] for p in failure.details["problems"]]


def test_rejected_values_are_not_echoed():
    secret = "hf_abcdefghijklmnopqrstuvwxyz0123"
    with pytest.raises(ToolFailure) as caught:
        deploy_training_job(job_name=secret)
    assert secret not in json.dumps(caught.value.to_dict())


def test_cli_accepts_both_flag_spellings():
    parser = build_parser(spec_of(deploy_training_job))
    underscored = vars(parser.parse_args(["--job_name", "a", "--num_nodes", "1", "--dry_run"]))
    dashed = vars(parser.parse_args(["--job-name", "a", "--num-nodes", "1", "--dry-run"]))
    assert (
        underscored == dashed == {"job_name": "a", "num_nodes": "1", "dry_run": True, "json": False}
    )


def test_cli_help_shows_field_descriptions(capsys):
    with pytest.raises(SystemExit) as done:
        run_cli(deploy_training_job, ["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "--job-name" in out and "DNS-1123" in out and "Default: local" in out


def test_cli_dry_run_json_is_the_result_model(tmp_path, capsys):
    code = run_cli(
        deploy_training_job,
        ["--job_name", "plan-me", "--dry_run", "--json", "--runs_dir", str(tmp_path)],
    )
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "planned"
    assert result["plan"]["argv"][1:5] == ["-P", "-m", "torch.distributed.run", "--standalone"]
    assert not (tmp_path / "plan-me").exists(), "a dry run starts and writes nothing"


def _gpu_host(tmp_path, monkeypatch, gpus: int) -> None:
    """This host as one with `gpus` GPUs, as the local target sees it: an `nvidia-smi` on
    PATH that lists them (`-L`'s format), the tool being absent here."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    listing = "".join(f"GPU {i}: NVIDIA H100 80GB HBM3 (UUID: GPU-{i:08d})\\n" for i in range(gpus))
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nprintf '{listing}'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_cli_new_flags_reach_the_plan(tmp_path, capsys, monkeypatch):
    # A GPU host, where cpu_offload saves GPU memory (a CPU host runs it too).
    _gpu_host(tmp_path, monkeypatch, 2)
    code = run_cli(
        deploy_training_job,
        [
            "--job-name", "flags",
            "--dry-run",
            "--json",
            "--runs-dir", str(tmp_path),
            "--cpu-offload",
            "--no-async-save",
            "--grad-accum-steps", "4",
            "--activation-checkpointing", "full",
            "--checkpoint-freq", "0",
            "--keep-last", "2",
            "--validation-freq", "0",
            "--max-restarts", "2",
            "--dataset", "roneneldan/TinyStories",
        ],
    )  # fmt: skip
    assert code == 0
    argv = json.loads(capsys.readouterr().out)["plan"]["argv"]
    trainer_at = argv.index("trainer")
    assert "--max-restarts=2" in argv[:trainer_at]
    args = argv[trainer_at + 1 :]
    given = dict(zip(args[::2], args[1::2], strict=True))
    assert given == {
        "--model_type": "debug",
        "--dataset": "roneneldan/TinyStories",
        "--grad_accum_steps": "4",
        "--sharding_strategy": "auto",
        "--activation_checkpointing": "full",
        "--cpu_offload": "true",
        "--checkpoint_dir": str(tmp_path / "flags" / "checkpoints"),
        "--checkpoint_freq": "0",
        "--keep_last": "2",
        "--async_save": "false",
        "--validation_freq": "0",
        "--seed": "0",
        "--output_dir": str(tmp_path / "flags"),
    }


def test_new_parameters_are_in_the_tool_schema():
    schema = spec_of(deploy_training_job).params.model_json_schema()["properties"]
    for name in (
        "model_name_or_path",
        "dataset",
        "dataset_config_name",
        "tokenizer",
        "grad_accum_steps",
        "activation_checkpointing",
        "cpu_offload",
        "checkpoint_dir",
        "checkpoint_freq",
        "keep_last",
        "async_save",
        "validation_freq",
        "max_restarts",
    ):
        assert schema[name]["description"], name
    assert schema["max_restarts"]["default"] == 0 and schema["max_restarts"]["minimum"] == 0
    assert "<runs_dir>/<job_name>/checkpoints" in schema["checkpoint_dir"]["description"]


def test_cli_bad_input_exits_2_with_message_and_hint(capsys):
    code = run_cli(deploy_training_job, ["--job_name", "NO", "--json"])
    assert code == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out)["error"]["code"] == "invalid_input"
    assert "error [invalid_input]" in captured.err and "hint:" in captured.err


def test_cli_unknown_flag_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as done:
        run_cli(deploy_training_job, ["--job_name", "a", "--bogus", "1"])
    assert done.value.code == 2
    assert "hint:" in capsys.readouterr().err


def test_failure_serializes_code_message_hint_details():
    failure = ToolFailure("x_code", "It broke.", "Do this.", {"k": 1})
    assert failure.to_dict() == {
        "error": {"code": "x_code", "message": "It broke.", "hint": "Do this.", "details": {"k": 1}}
    }
    assert str(failure) == "It broke. (hint: Do this.)"
