"""The FSDP-on-EKS documents' calls as written (issue 46): each, over MCP and through the
console script a user types, gives a result or a refusal naming the exact call (or
setting) to make instead. One row per call; both surfaces run every row, in a project
of the user's own (a temporary directory that is not this checkout)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_server import build_server
from skills.shared.errors import ErrorCode

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent  # the console scripts of this install
TOKEN = "hf_" + "Zq7" * 11 + "x"  # shaped like a real token: it must never be echoed


@dataclass(frozen=True)
class Outcome:
    """One surface's answer: the result's data, or the error (code, message, hint, ...)."""

    data: dict[str, Any] | None
    error: dict[str, Any] | None
    text: str  # everything it printed or returned, to check what it must never say


@dataclass(frozen=True)
class Row:
    name: str
    tool: str  # the name the document calls over MCP
    arguments: dict[str, Any]
    argv: list[str]  # the document's command line: a console script and its flags
    check: Callable[[Outcome], None]
    aws: str = "none"  # none: no credentials; moto: the moto server's
    git_remote: bool = False


def _planned(outcome: Outcome) -> dict[str, Any]:
    assert outcome.error is None, outcome.error
    assert outcome.data is not None
    return outcome.data


def _refused(outcome: Outcome, code: str) -> dict[str, Any]:
    assert outcome.error is not None, outcome.data
    assert outcome.error["code"] == code and outcome.error["hint"], outcome.error
    return outcome.error


def quick_start_applies(outcome: Outcome) -> None:
    data = _planned(outcome)
    assert data["status"] in ("created", "updated", "unchanged") and not data["dry_run"]
    kinds = {r["kind"]: r["name"] for r in data["resources"]}
    assert kinds["ecr_repository"] == "pytorch-fsdp"  # the project's name
    assert kinds["codebuild_project"] == "pytorch-fsdp"


def names_the_source_and_the_preview(outcome: Outcome) -> None:
    error = _refused(outcome, "invalid_input")
    assert "source_url" in error["hint"] and "git remote add origin" in error["hint"]
    step = error["next_step"]
    assert step["tool"] == "setup_codebuild" and step["arguments"]["dry_run"] is True
    assert step["arguments"]["ecr_repository"] == "pytorch-fsdp"


def dry_run_previews_without_credentials(outcome: Outcome) -> None:
    data = _planned(outcome)
    assert data["status"] == "planned"
    assert {r["action"] for r in data["resources"]} == {"would_create"}
    notes = " ".join(data["notes"])
    assert "no AWS credentials" in notes and "source_url" in notes
    step = data["next_step"]
    assert step["tool"] == "setup_codebuild" and "source_url" not in step["arguments"]


def redirects_to(tool: str, arguments: dict[str, Any]) -> Callable[[Outcome], None]:
    def check(outcome: Outcome) -> None:
        error = _refused(outcome, "invalid_input")
        assert error["details"]["renamed_to"] == tool
        assert error["next_step"]["tool"] == tool
        assert error["next_step"]["arguments"] == arguments

    return check


def packaged_image_is_offered(outcome: Outcome) -> None:
    error = _refused(outcome, "not_found")
    assert "Leave dockerfile out" in error["hint"] and "trainer image" in error["hint"]
    assert error["next_step"]["tool"] == "build_image"
    assert "dockerfile" not in error["next_step"]["arguments"]


def alias_says_its_size(outcome: Outcome) -> None:
    data = _planned(outcome)
    assert data["model"].startswith("llama_v3_8b (8.03B")
    said = " ".join(data["warnings"])
    assert "'llama_v3' means llama_v3_8b" in said and "llama_v3_1b (1.24B" in said


def memory_fixes_name_the_smaller_preset(outcome: Outcome) -> None:
    error = _refused(outcome, "gpu_memory_exceeded")
    assert "'llama_v3' means llama_v3_8b" in error["message"]
    assert "model_type='llama_v3_1b' (1.24B parameters)" in error["details"]["fixes"]


def gpt2_is_planned(outcome: Outcome) -> None:
    assert _planned(outcome)["model"].startswith("gpt2 (123.55M")


def torchrun_path_launches(outcome: Outcome) -> None:
    manifest = _planned(outcome)["plan"]["manifest"]
    (replica, *_) = manifest["spec"]["pytorchReplicaSpecs"].values()
    command = replica["template"]["spec"]["containers"][0]["command"]
    assert command[0] == "/opt/conda/bin/torchrun" and "trainer" in command


def token_goes_to_the_environment(outcome: Outcome) -> None:
    error = _refused(outcome, "invalid_input")
    assert "hf_token" in error["message"]
    assert "HF_TOKEN" in error["hint"] and "Secret" in error["hint"]
    assert TOKEN not in outcome.text


def refused_at_plan_time(*fragments: str) -> Callable[[Outcome], None]:
    def check(outcome: Outcome) -> None:
        error = _refused(outcome, "invalid_input")
        assert "would refuse this job at start" in error["message"]
        for fragment in fragments:
            assert fragment in error["message"], error["message"]

    return check


KUBE = {"target": "kubernetes", "image_uri": "registry.example/trainer:1"}
KUBE_FLAGS = ["--target", "kubernetes", "--image_uri", "registry.example/trainer:1"]

ROWS = [
    Row("the CodeBuild quick start", "setup_codebuild",
        {"project_name": "pytorch-fsdp", "region": "us-west-2"},
        ["setup-codebuild.sh", "--project-name", "pytorch-fsdp", "--region", "us-west-2"],
        quick_start_applies, aws="moto", git_remote=True),
    Row("the quick start in a project with no git remote", "setup_codebuild",
        {"project_name": "pytorch-fsdp", "region": "us-west-2"},
        ["setup-codebuild.sh", "--project-name", "pytorch-fsdp", "--region", "us-west-2"],
        names_the_source_and_the_preview),
    Row("the quick start's dry run, no credentials and no remote", "setup_codebuild",
        {"project_name": "pytorch-fsdp", "region": "us-west-2", "dry_run": True},
        ["setup-codebuild.sh", "--project-name", "pytorch-fsdp", "--region", "us-west-2",
         "--dry_run"],
        dry_run_previews_without_credentials),
    Row("build_docker_image", "build_docker_image",
        {"dockerfile": "Dockerfile", "image_name": "pytorch-fsdp", "tag": "v1"},
        ["build-docker-image", "--dockerfile", "Dockerfile", "--image-name", "pytorch-fsdp",
         "--tag", "v1"],
        redirects_to("build_image",
                     {"dockerfile": "Dockerfile", "repository": "pytorch-fsdp", "tag": "v1"})),
    Row("push_image.py", "push_image",
        {"image": "pytorch-fsdp:v1", "repository": "pytorch-fsdp", "region": "us-west-2"},
        ["push_image.py", "--image", "pytorch-fsdp:v1", "--repository", "pytorch-fsdp",
         "--region", "us-west-2"],
        redirects_to("push_to_ecr", {"image": "pytorch-fsdp:v1", "repository": "pytorch-fsdp",
                                     "region": "us-west-2"})),
    Row("build_image(dockerfile='Dockerfile') without one", "build_image",
        {"dockerfile": "Dockerfile"}, ["build-image", "--dockerfile", "Dockerfile"],
        packaged_image_is_offered),
    Row("model_type='llama_v3'", "deploy_training_job",
        {"job_name": "llama", "model_type": "llama_v3", "dry_run": True},
        ["deploy-training-job", "--job_name", "llama", "--model_type", "llama_v3", "--dry_run"],
        alias_says_its_size),
    Row("model_type='llama_v3' on a GPU it does not fit", "deploy_training_job",
        {"job_name": "llama", "model_type": "llama_v3", "instance_type": "g5.12xlarge",
         "dry_run": True, **KUBE},
        ["deploy-training-job", "--job_name", "llama", "--model_type", "llama_v3",
         "--instance_type", "g5.12xlarge", "--dry_run", *KUBE_FLAGS],
        memory_fixes_name_the_smaller_preset),
    Row("model_type='gpt2'", "deploy_training_job",
        {"job_name": "gpt", "model_type": "gpt2", "dry_run": True},
        ["deploy-training-job", "--job_name", "gpt", "--model_type", "gpt2", "--dry_run"],
        gpt2_is_planned),
    Row("torchrun_path", "deploy_training_job",
        {"job_name": "tr", "torchrun_path": "/opt/conda/bin/torchrun", "dry_run": True, **KUBE},
        ["deploy-training-job", "--job_name", "tr", "--torchrun_path",
         "/opt/conda/bin/torchrun", "--dry_run", *KUBE_FLAGS],
        torchrun_path_launches),
    Row("hf_token='hf_...'", "deploy_training_job",
        {"job_name": "tok", "hf_token": TOKEN, "dry_run": True},
        ["deploy-training-job", "--job_name", "tok", "--hf_token", TOKEN, "--dry_run"],
        token_goes_to_the_environment),
    Row("a dataset that is not there", "deploy_training_job",
        {"job_name": "data", "dataset": "data/train.jsonl", "dry_run": True},
        ["deploy-training-job", "--job_name", "data", "--dataset", "data/train.jsonl",
         "--dry_run"],
        refused_at_plan_time("data/train.jsonl' does not exist")),
    Row("seq_len above the model's positions", "deploy_training_job",
        {"job_name": "long", "model_type": "gpt2", "seq_len": 2048, "dry_run": True, **KUBE},
        ["deploy-training-job", "--job_name", "long", "--model_type", "gpt2", "--seq_len",
         "2048", "--dry_run", *KUBE_FLAGS],
        refused_at_plan_time("seq_len 2048 exceeds max_seq_len 1024")),
]  # fmt: skip


@pytest.fixture
def user_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project of the user's own, the working directory of both surfaces."""
    project = tmp_path / "project"
    project.mkdir()
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    monkeypatch.chdir(project)
    monkeypatch.setenv("FSDP_EKS_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("FSDP_EKS_CACHE_DIR", str(tmp_path / "cache"))
    return project


def _no_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_PROFILE", "AWS_ENDPOINT_URL"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    for name in ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
        (tmp_path / name).write_text("")
        monkeypatch.setenv(name, str(tmp_path / name))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def over_mcp(tool: str, arguments: dict[str, Any]) -> Outcome:
    async def call() -> Any:
        async with Client(build_server()) as client:
            return await client.call_tool(tool, arguments)

    result = anyio.run(call)
    text = "".join(getattr(c, "text", "") for c in result.content)
    if result.is_error:
        return Outcome(None, json.loads(text)["error"], text)
    return Outcome(result.structured_content, None, text)


def over_the_cli(argv: list[str], cwd: Path) -> Outcome:
    done = subprocess.run(
        [str(BIN / argv[0]), *argv[1:], "--json"], cwd=cwd, env=dict(os.environ),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    text = done.stdout + done.stderr
    assert "Traceback" not in text, text[-3000:]
    document = json.loads(done.stdout)
    if set(document) == {"error"}:  # a failure (a result may carry an error field)
        assert done.returncode == ErrorCode(document["error"]["code"]).exit_status
        return Outcome(None, document["error"], text)
    assert done.returncode == 0, text[-3000:]
    return Outcome(document, None, text)


@pytest.mark.parametrize("surface", ["mcp", "cli"])
@pytest.mark.parametrize("row", ROWS, ids=[row.name for row in ROWS])
def test_each_documented_call_works_or_names_the_call_to_make(
    row: Row, surface: str, user_project: Path, tmp_path: Path, monkeypatch, request
):
    if row.aws == "moto":
        request.getfixturevalue("moto_server")
    else:
        _no_credentials(monkeypatch, tmp_path)
    if row.git_remote:
        subprocess.run(["git", "-C", str(user_project), "remote", "add", "origin",
                        "git@github.com:team/pytorch-fsdp.git"], check=True)  # fmt: skip
    if surface == "mcp":
        row.check(over_mcp(row.tool, row.arguments))
    else:
        row.check(over_the_cli(row.argv, user_project))
