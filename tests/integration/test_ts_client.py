"""A real client in CI (issue 32): the official MCP TypeScript SDK client, installed from
the npm registry by this test's setup (tests/ts_client/package.json, cached by its hash),
drives `python -m mcp_server` over stdio from a project's subdirectory: every tool's input
and output schema compiles under strict Ajv, and a dry run, a list and a failing call
come back with structuredContent that validates against the tool's outputSchema."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from commands import all_tools

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "tests" / "ts_client"
# Where the npm packages are installed once per package.json (reruns reuse them).
NPM_DIR_ENV = "FSDP_EKS_TS_CLIENT_DIR"


def _client_dir() -> Path:
    manifest = (CLIENT / "package.json").read_bytes()
    default = Path.home() / ".cache" / "fsdp-eks" / "ts-client"
    base = Path(os.environ.get(NPM_DIR_ENV) or default)
    return base / hashlib.sha256(manifest).hexdigest()[:16]


@pytest.fixture(scope="session")
def ts_client() -> Path:
    """The client's folder with its node_modules (npm install on the first run)."""
    npm = shutil.which("npm")
    assert npm and shutil.which("node"), "node and npm are needed: make system-deps"
    folder = _client_dir()
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "client.mjs"):
        shutil.copyfile(CLIENT / name, folder / name)
    if not (folder / "node_modules" / "@modelcontextprotocol" / "sdk" / "package.json").exists():
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--no-package-lock"],
            cwd=folder, capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
    return folder


def _drive(ts_client: Path, project: Path, cwd: Path, state: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_EKS_")}
    env.update({"PYTHONPATH": str(ROOT), "FSDP_EKS_STATE_DIR": str(state)})
    server = {
        "command": sys.executable,
        "args": ["-m", "mcp_server", "--workspace", str(project)],
        "cwd": str(cwd),
        "env": env,
    }
    done = subprocess.run(
        ["node", str(ts_client / "client.mjs"), json.dumps(server)],
        cwd=ts_client, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_the_typescript_sdk_client_lists_validates_and_calls(ts_client, tmp_path):
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    report = _drive(ts_client, project, project / "src", tmp_path / "state")

    assert report["schemaErrors"] == []
    assert sorted(report["tools"]) == sorted(spec.name for spec in all_tools())
    assert report["serverVersion"]["version"] == metadata.version("fsdp-eks")
    assert set(report["capabilities"]) == {"tools"}  # no empty prompts or resources

    calls = report["calls"]
    assert all("thrown" not in call for call in calls.values()), calls
    dry = calls["dry_run"]
    assert not dry["isError"] and dry["valid"] is True, dry
    assert dry["structuredContent"]["status"] == "planned"
    # runs_dir "runs" from the project's subdirectory: the project's runs/, not src/runs.
    assert dry["structuredContent"]["plan"]["run_dir"] == str(project / "runs" / "ts-dry")
    listed = calls["list"]
    assert not listed["isError"] and listed["valid"] is True, listed
    assert listed["structuredContent"]["jobs"] == []
    failing = calls["failing"]
    assert failing["isError"] and json.loads(failing["text"])["error"]["code"] == "job_not_found"
    assert failing["valid"] in (None, True), failing
