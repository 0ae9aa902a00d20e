"""A user's project with its own `trainer/`, `skills/`, `commands/` and `mcp_server/`
packages (issue 46 item 0): the suite installs into it with its console script, a client
starts the server from the config it wrote (in the project, and in a subfolder), lists the
tools and trains a small job to the end, and the CLI from a subfolder sees that job; none
of the project's packages is ever imported (each leaves a marker, then refuses)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent  # this installation's console scripts
POISONED = ("trainer", "skills", "commands", "mcp_server")
JOB = {"gpu_per_node": 1, "max_steps": 2, "seq_len": 64, "train_batch_size": 2}


def _poison(project: Path) -> None:
    for package in POISONED:
        folder = project / package
        folder.mkdir()
        marker = project / f"IMPORTED-{package}"
        code = f"open({str(marker)!r}, 'w').close()\nraise ImportError('the project {package}')\n"
        (folder / "__init__.py").write_text(code)
        (folder / "__main__.py").write_text(code)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    _poison(project)
    return project


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FSDP_EKS_", "PYTHON"))}
    return {**env, "HOME": str(home), "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}"}


def _markers(project: Path) -> list[str]:
    return sorted(p.name for p in project.glob("IMPORTED-*"))


def _serve(project: Path, cwd: Path, env: dict[str, str], dry_run: bool) -> dict[str, Any]:
    """The server started as Claude Code starts it (the .mcp.json entry, in `cwd`): its
    tools, and a small local job planned, or trained to the end."""
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["fsdp-eks"]
    params = StdioServerParameters(
        command=entry["command"], args=entry["args"], cwd=str(cwd), env=env
    )

    async def scenario() -> dict[str, Any]:
        async with Client(params, mode="legacy") as client:
            tools = [tool.name for tool in (await client.list_tools()).tools]
            result: Any = await client.call_tool(
                "deploy_training_job",
                {"job_name": f"from-{cwd.name}", "target": "local", **JOB, "dry_run": dry_run}
                | ({} if dry_run else {"wait_seconds": 600}),
            )
            assert not result.is_error, result.content[0].text
            return {"tools": tools, "job": result.structured_content}

    return anyio.run(scenario)


def test_a_project_with_the_suites_package_names_installs_serves_and_trains(project, env):
    installed = subprocess.run(
        ["fsdp-eks-mcp", "install", "--client", "claude", "--json"],
        cwd=project / "src",  # a subfolder: the project is the git root
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert installed.returncode == 0, installed.stderr
    assert json.loads(installed.stdout)["warnings"] == []
    entry = json.loads((project / ".mcp.json").read_text())["mcpServers"]["fsdp-eks"]
    assert entry["command"] == "fsdp-eks-mcp"  # on PATH, not this machine's path
    assert (project / ".gitignore").read_text() == "runs/\n"

    planned = _serve(project, project, env, dry_run=True)
    assert "deploy_training_job" in planned["tools"]
    assert planned["job"]["plan"]["run_dir"] == str(project / "runs" / "from-project")
    trained = _serve(project, project / "src", env, dry_run=False)
    assert trained["job"]["status"] == "succeeded", trained["job"]
    assert trained["job"]["run_dir"] == str(project / "runs" / "from-src")

    listed = subprocess.run(  # the CLI from a subfolder sees the server's jobs
        [shutil.which("list-training-jobs", path=env["PATH"]) or "", "--json"],
        cwd=project / "src",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert "from-src" in {job["job_name"] for job in json.loads(listed.stdout)["jobs"]}
    assert _markers(project) == []
