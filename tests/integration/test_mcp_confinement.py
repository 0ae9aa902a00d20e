"""An MCP caller's paths stay under the server's workspace (plus read-only --allow-path
roots) and HTTP needs the server's bearer token (test_mcp_http_access: on every bind);
the CLI stays unconfined. Each test spawns `python -m mcp_server` and talks to it with
the SDK's client; every deploy is a dry run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from mcp_server import build_server
from mcp_server.workspace import Workspace
from skills.shared.errors import ToolFailure
from skills.shared.paths import LocalPath
from tests.services._common import start_listening

ROOT = Path(__file__).resolve().parents[2]
# The server runs from the test's directory (as from a project's); imports come from ROOT.
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
for _name in ("FSDP_EKS_WORKSPACE", "FSDP_EKS_ALLOW_PATHS", "FSDP_EKS_MCP_TOKEN"):
    ENV.pop(_name, None)
# Plans only: a small local job that any host can plan.
JOB = {"gpu_per_node": 1, "dry_run": True}


def _deploy_all(params: StdioServerParameters, calls: dict[str, dict]) -> dict:
    """Each named call's result, all over one server session."""

    async def scenario():
        async with Client(params) as client:
            return {
                name: await client.call_tool("deploy_training_job", {"job_name": name, **JOB, **a})
                for name, a in calls.items()
            }

    return anyio.run(scenario)


def _error(result) -> dict:
    assert result.is_error, result.structured_content
    return json.loads(result.content[0].text)["error"]


@pytest.fixture
def dirs(tmp_path) -> dict[str, Path]:
    """A project directory with its workspace, a read-only data root and an outside dir."""
    paths = {name: tmp_path / name for name in ("project", "ws", "data", "outside")}
    for path in paths.values():
        path.mkdir()
    (paths["data"] / "corpus.txt").write_text("hello\n")
    (paths["ws"] / "escape").symlink_to(paths["outside"])  # a link inside, leading out
    return paths


def _stdio(cwd: Path, *args: str, env: dict | None = None) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_server", *args], cwd=str(cwd), env=env or ENV
    )


def test_paths_outside_the_workspace_are_refused_with_a_typed_error(dirs):
    params = _stdio(
        dirs["project"], "--workspace", str(dirs["ws"]), "--allow-path", str(dirs["data"])
    )
    refused = {
        "etc": ({"dataset": "/etc"}, "dataset", "/etc"),
        "ssh-key": ({"tokenizer": "~root/.ssh/id_rsa"}, "tokenizer", "/root/.ssh/id_rsa"),
        "outside": ({"runs_dir": str(dirs["outside"])}, "runs_dir", str(dirs["outside"])),
        "symlink": ({"runs_dir": str(dirs["ws"] / "escape")}, "runs_dir", str(dirs["outside"])),
        "read-root": (
            {"checkpoint_dir": str(dirs["data"] / "ckpt")}, "checkpoint_dir",
            str(dirs["data"] / "ckpt"),
        ),
        "dot-dot": ({"model_name_or_path": "./../outside"}, "model_name_or_path",
                    str(dirs["outside"])),
    }  # fmt: skip
    results = _deploy_all(params, {name: args for name, (args, _, _) in refused.items()})
    for name, (_, field, path) in refused.items():
        error = _error(results[name])
        assert error["code"] == "path_not_allowed", (name, error)
        assert error["details"]["field"] == field and error["details"]["path"] == path
        assert str(dirs["ws"]) in error["details"]["roots"] and error["hint"]
        assert field in error["message"] and path in error["message"]
    # Written paths: the workspace only, never the read-only root.
    assert _error(results["read-root"])["details"]["roots"] == [str(dirs["ws"])]
    assert "--allow-path" in _error(results["etc"])["hint"]
    assert not any(dirs["outside"].iterdir())


def test_an_empty_runs_dir_is_refused(dirs):
    result = _deploy_all(_stdio(dirs["project"]), {"empty": {"runs_dir": ""}})["empty"]
    error = _error(result)
    # The schema refuses it before confinement looks (min_length=1).
    assert error["code"] == "invalid_input"
    assert [p["field"] for p in error["details"]["problems"]] == ["runs_dir"]


def test_s3_hub_names_and_allowed_read_roots_plan(dirs):
    # Set through the environment this time, as an MCP registration's "env" would.
    env = {**ENV, "FSDP_EKS_WORKSPACE": str(dirs["ws"]), "FSDP_EKS_ALLOW_PATHS": str(dirs["data"])}
    corpus = str(dirs["data"] / "corpus.txt")
    calls = {
        "s3": {"dataset": "s3://my-bucket/corpus/", "checkpoint_dir": "s3://my-bucket/ckpt"},
        "hub": {"dataset": "wikitext", "tokenizer": "openai-community/gpt2"},
        "allowed": {"dataset": corpus, "runs_dir": str(dirs["ws"] / "jobs")},
    }
    results = _deploy_all(_stdio(dirs["project"], env=env), calls)
    for name, result in results.items():
        assert not result.is_error, (name, result.content)
        assert result.structured_content["status"] == "planned"
    plans = {name: r.structured_content["plan"] for name, r in results.items()}
    assert plans["s3"]["checkpoint_dir"] == "s3://my-bucket/ckpt"
    assert "openai-community/gpt2" in plans["hub"]["argv"]
    assert corpus in plans["allowed"]["argv"]
    assert plans["allowed"]["run_dir"] == str(dirs["ws"] / "jobs" / "allowed")
    # runs_dir left out: the job goes in the workspace's runs/, not the server's directory.
    assert plans["s3"]["run_dir"] == str(dirs["ws"] / "runs" / "s3")


def test_default_workspace_is_the_servers_directory(dirs):
    """Started in a project (as the shipped .mcp.json starts it), the project is the
    workspace: jobs go to ./runs as the CLI's, and any place in the project is allowed;
    a place outside it is not."""
    project = dirs["project"]
    calls = {
        "omitted": {},
        "given": {"runs_dir": "runs"},
        "nested": {"runs_dir": "runs/a"},
        "elsewhere": {"runs_dir": "jobs"},
        "outside": {"runs_dir": str(dirs["outside"])},
    }
    results = _deploy_all(_stdio(project), calls)
    assert _error(results.pop("outside"))["code"] == "path_not_allowed"
    for name, result in results.items():
        assert not result.is_error, (name, result.content)
    run_dirs = {name: r.structured_content["plan"]["run_dir"] for name, r in results.items()}
    assert run_dirs == {
        "omitted": str(project / "runs" / "omitted"),
        "given": str(project / "runs" / "given"),
        "nested": str(project / "runs" / "a" / "nested"),
        "elsewhere": str(project / "jobs" / "elsewhere"),
    }


def test_the_cli_is_not_confined(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "commands" / "deploy_training_job.py"), "--job_name", "cli",
         "--gpu_per_node", "1", "--dataset", "/etc", "--runs_dir", str(tmp_path), "--dry_run",
         "--json"],
        capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "planned" and "/etc" in result["plan"]["argv"]


def test_confinement_leaves_the_tool_listing_unchanged(tmp_path):
    async def listing(server):
        async with Client(server) as client:
            return [t.model_dump(mode="json") for t in (await client.list_tools()).tools]

    confined = build_server(workspace=Workspace(root=tmp_path, read_roots=(tmp_path,)))
    assert anyio.run(listing, confined) == anyio.run(listing, build_server())


@pytest.mark.parametrize("value", ["", "runs\x00/x", "runs/\nx", "runs\x7f"])
def test_empty_values_and_control_characters_are_refused(tmp_path, value):
    with pytest.raises(ToolFailure) as refused:
        Workspace(root=tmp_path).check("runs_dir", value, LocalPath())
    assert refused.value.code == "path_not_allowed" and refused.value.exit_status == 2
    assert value not in refused.value.message or not value


@pytest.mark.parametrize(
    "value", ["s3://bucket/../../etc", "s3://bucket/a/./b", "s3://x", "s3://../etc"]
)
def test_s3_uris_that_read_as_paths_out_are_not_waved_through(tmp_path, value):
    with pytest.raises(ToolFailure):
        Workspace(root=tmp_path / "ws").check("runs_dir", value, LocalPath())


# --- HTTP -----------------------------------------------------------------------


def _post_status(url: str, headers: dict[str, str]) -> int:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
        **headers,
    })  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as refused:
        return refused.code


def test_http_with_a_token_answers_only_requests_that_carry_it(tmp_path):
    token = "s3cret-token-for-the-test"
    server, port = start_listening(
        lambda port: [sys.executable, "-m", "mcp_server", "--http", "--host", "0.0.0.0",
                      "--port", str(port)],
        cwd=tmp_path, env={**ENV, "FSDP_EKS_MCP_TOKEN": token},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        statuses = [
            _post_status(url, {}),
            _post_status(url, {"Authorization": f"Bearer {token}x"}),
            _post_status(url, {"Authorization": "Bearer "}),
            _post_status(url, {"Authorization": token}),
        ]

        async def scenario():
            headers = {"Authorization": f"Bearer {token}"}
            async with (
                httpx2.AsyncClient(headers=headers) as http,
                Client(streamable_http_client(url, http_client=http)) as client,
            ):
                return [t.name for t in (await client.list_tools()).tools]

        names = anyio.run(scenario)
    finally:
        server.terminate()
        out, err = server.communicate(timeout=10)
    assert statuses == [401, 401, 401, 401]
    assert "deploy_training_job" in names
    assert token not in out + err


def test_a_cluster_jobs_paths_are_the_clusters_and_not_confined(dirs, monkeypatch):
    """On Kubernetes (or Slurm through ssh_host) dataset and checkpoint_dir name paths in
    the pods, not on the server: the workspace does not judge them. The server's own
    files (a kubeconfig it reads, a Slurm record's runs_dir) still are."""
    monkeypatch.setenv("KUBECONFIG", str(dirs["outside"] / "absent"))  # a plan needs none
    server = build_server(workspace=Workspace.create(str(dirs["ws"])))
    on_cluster = {"dataset": "/fsx/data/train.jsonl", "checkpoint_dir": "/fsx/ckpt"}
    calls = {
        "k8s": {"target": "kubernetes", "image_uri": "registry.example/t:1", **on_cluster},
        "k8s-kubeconfig": {"target": "kubernetes", "image_uri": "registry.example/t:1",
                           "kubeconfig": "/etc/kubeconfig"},
        "here": {"gpu_per_node": 1, **on_cluster},
    }  # fmt: skip

    async def scenario():
        async with Client(server) as client:
            return {
                name: await client.call_tool(
                    "deploy_training_job", {"job_name": name, "dry_run": True, **args}
                )
                for name, args in calls.items()
            }

    results = anyio.run(scenario)
    assert not results["k8s"].is_error, results["k8s"].content
    command = json.dumps(results["k8s"].structured_content["plan"]["manifest"])
    assert "/fsx/data/train.jsonl" in command
    assert _error(results["k8s-kubeconfig"])["details"]["field"] == "kubeconfig"
    assert _error(results["here"])["details"]["field"] in ("dataset", "checkpoint_dir")
