"""The shipped client configs (.mcp.json, opencode.json) serve this repo: the server is
started as they start it (their command, stdio, in a copy of the repo) and build_image
finds the repo's Dockerfile with no arguments and by its relative name."""

from __future__ import annotations

import base64
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BASE = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"  # a stand-in pushed to the mirror
# podman here cannot RUN: the no-RUN variant of the repo's Dockerfile.
NO_RUN = (
    f"FROM {BASE}\nWORKDIR /opt/fsdp-eks\nCOPY pyproject.toml ./\nCOPY trainer ./trainer\n"
    'LABEL fsdp-eks.role="trainer"\nCMD ["python", "-m", "trainer"]\n'
)


def _shipped_commands() -> dict[str, list[str]]:
    """Each shipped config's server command line, as the client would run it."""
    claude = json.loads((ROOT / ".mcp.json").read_text())["mcpServers"]["fsdp-eks"]
    opencode = json.loads((ROOT / "opencode.json").read_text())["mcp"]["fsdp-eks"]
    return {".mcp.json": [claude["command"], *claude["args"]], "opencode.json": opencode["command"]}


@pytest.fixture
def repo_copy(tmp_path) -> Path:
    """The repo's files (not .git) in a fresh directory, with the repo's venv linked in,
    as a checkout after `make setup-dev` looks."""
    copy = tmp_path / "fsdp-eks"
    skip = shutil.ignore_patterns(".git", ".venv", "runs", "__pycache__", ".*_cache")
    shutil.copytree(ROOT, copy, ignore=skip)
    (copy / ".venv").symlink_to(ROOT / ".venv")
    return copy


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_EKS_")}
    return {**env, **extra}


def _call(command: list[str], cwd: Path, env: dict[str, str], calls: list[dict]) -> list:
    params = StdioServerParameters(command=command[0], args=command[1:], cwd=str(cwd), env=env)

    async def scenario():
        async with Client(params) as client:
            return [await client.call_tool("build_image", arguments) for arguments in calls]

    return anyio.run(scenario)


def _result(state: dict) -> dict:
    return state["result"] if isinstance(state.get("result"), dict) else state


@pytest.mark.parametrize("config", [".mcp.json", "opencode.json"])
def test_the_shipped_config_analyzes_the_repos_dockerfile(repo_copy, tmp_path, config):
    command = _shipped_commands()[config]
    env = _env(FSDP_EKS_STATE_DIR=str(tmp_path / "state"))
    calls = [{"analyze_only": True}, {"dockerfile": "Dockerfile", "analyze_only": True}]
    for result in _call(command, repo_copy, env, calls):
        assert not result.is_error, result.content
        # An operation's state nests the tool's result (the truth slice may flatten it).
        analyzed = _result(result.structured_content)
        assert analyzed["status"] == "analyzed", analyzed
        assert analyzed["dockerfile"] == str(repo_copy / "Dockerfile")
        assert analyzed["resolved"]["torch"] == "2.13.0", analyzed["resolved"]


@pytest.fixture
def mirror(docker_api, registry, tmp_path) -> Iterator[dict[str, str]]:
    """The registry holding BASE as the Docker Hub mirror, its login in a docker config:
    the environment a build over the shipped config needs here."""
    config_dir = tmp_path / "docker-config"
    config_dir.mkdir()
    auth = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
    (config_dir / "config.json").write_text(json.dumps({"auths": {registry.host: {"auth": auth}}}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DOCKER_CONFIG", str(config_dir))
        client = docker_api.client()
        base = tmp_path / "base"
        base.mkdir()
        (base / "os-release").write_text("stand-in for the pytorch/pytorch image\n")
        (base / "Dockerfile").write_text("FROM scratch\nCOPY os-release /etc/os-release\n")
        name = f"{registry.host}/{BASE}"
        list(client.api.build(path=str(base), tag=name, decode=True, rm=True))
        pushed = list(client.api.push(name.rsplit(":", 1)[0], tag="2.5.1-cuda12.4-cudnn9-runtime",
                                      stream=True, decode=True))  # fmt: skip
        assert not [e for e in pushed if "error" in e or "errorDetail" in e], pushed
        client.api.remove_image(name)
        yield {"DOCKER_CONFIG": str(config_dir), "FSDP_EKS_BASE_MIRROR": registry.host,
               "DOCKER_HOST": os.environ["DOCKER_HOST"]}  # fmt: skip


def test_build_image_with_no_arguments_builds_the_repos_dockerfile(repo_copy, tmp_path, mirror):
    (repo_copy / "Dockerfile").write_text(NO_RUN)
    env = _env(FSDP_EKS_STATE_DIR=str(tmp_path / "state"), **mirror)
    calls = [
        {"tag": "shipped-a", "wait_seconds": 120},
        {"dockerfile": "Dockerfile", "tag": "shipped-b", "wait_seconds": 120},
    ]
    results = _call(_shipped_commands()[".mcp.json"], repo_copy, env, calls)
    for result, tag in zip(results, ("shipped-a", "shipped-b"), strict=True):
        assert not result.is_error, result.content
        state = result.structured_content
        built = _result(state)
        assert built["status"] == "built", state
        assert built["dockerfile"] == str(repo_copy / "Dockerfile")
        assert f"fsdp-eks-trainer:{tag}" in built["tags"], built


def test_a_dockerfile_is_a_read_path_unless_a_fix_may_be_written_beside_it(tmp_path):
    """Under an --allow-path root a Dockerfile may be analyzed, or built with auto_fix off;
    a call that may write its fix there is refused; with no dockerfile named, the
    workspace's own is used, else the packaged trainer's."""
    workspace, data = tmp_path / "ws", tmp_path / "data"
    workspace.mkdir()
    data.mkdir()
    (data / "Dockerfile").write_text(NO_RUN)
    command = [str(ROOT / ".venv/bin/python"), "-m", "mcp_server", "--workspace", str(workspace),
               "--allow-path", str(data)]  # fmt: skip
    dockerfile = str(data / "Dockerfile")
    calls = [
        {"dockerfile": dockerfile, "analyze_only": True, "auto_fix": False},
        {"dockerfile": dockerfile, "analyze_only": True},
        {"dockerfile": dockerfile, "analyze_only": True, "auto_fix": False, "write": True},
        {"analyze_only": True, "auto_fix": False},
    ]
    env = _env(FSDP_EKS_STATE_DIR=str(tmp_path / "state"), PYTHONPATH=str(ROOT))
    read, fix_beside, fix_over, default = _call(command, tmp_path, env, calls)
    assert not read.is_error, read.content
    assert _result(read.structured_content)["status"] == "analyzed"
    for refused in (fix_beside, fix_over):
        error = json.loads(refused.content[0].text)["error"]
        assert refused.is_error and error["code"] == "path_not_allowed", error
        assert "writes there" in error["message"]
    # Left out, the Dockerfile is the workspace's (not the server's directory's); the
    # workspace has none, so the trainer image this package ships is analyzed.
    assert not default.is_error, default.content
    packaged = _result(default.structured_content)
    assert packaged["packaged_trainer"] is True and packaged["status"] == "analyzed"
    assert not packaged["dockerfile"].startswith(str(tmp_path / "Dockerfile"))
