"""The server serves the user's project (issue 32): relative paths and the tools' default
places resolve in the workspace it was started for, or the client's root when none was
named, never in the directory it happens to run in; what a client sees of the server
(version, capabilities, the HTTP endpoint, texts and waits) is what every client holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp_types import ListRootsResult, Root

from mcp_server import build_server
from mcp_server.server import MCP_MAX_WAIT_S, summary_text
from mcp_server.workspace import Workspace
from tests.services._common import start_listening

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_EKS_")}
ENV["PYTHONPATH"] = str(ROOT)
JOB = {"gpu_per_node": 1, "dry_run": True}


def _stdio(cwd: Path, *args: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_server", *args], cwd=str(cwd), env=ENV
    )


def _plan(server: Any, job: str, roots: list[Path] | None = None, **arguments: Any) -> dict:
    async def list_roots(_context: Any) -> ListRootsResult:
        return ListRootsResult(
            roots=[Root.model_validate({"uri": r.as_uri()}) for r in roots or []]
        )

    async def scenario() -> Any:
        callback: Any = list_roots if roots is not None else None
        async with Client(server, mode="legacy", list_roots_callback=callback) as client:
            result: Any = await client.call_tool(
                "deploy_training_job", {"job_name": job, **JOB, **arguments}
            )
            assert not result.is_error, result.content[0].text
            return result.structured_content["plan"]

    return anyio.run(scenario)


@pytest.fixture
def places(tmp_path) -> dict[str, Path]:
    paths = {name: tmp_path / name for name in ("project", "elsewhere")}
    for path in paths.values():
        path.mkdir()
    (paths["project"] / "sub").mkdir()
    return paths


def test_the_clients_root_is_the_workspace_when_none_was_named(places):
    """Started elsewhere (a user-scope install) with no --workspace: the client's root."""
    project = places["project"]
    plan = _plan(_stdio(places["elsewhere"]), "rooted", roots=[project])
    assert plan["run_dir"] == str(project / "runs" / "rooted")
    given = _plan(_stdio(places["elsewhere"]), "given", roots=[project], runs_dir="sub/runs")
    assert given["run_dir"] == str(project / "sub" / "runs" / "given")
    assert not any(places["elsewhere"].iterdir())


def test_a_named_workspace_wins_over_roots_and_the_servers_directory(places):
    project = places["project"]
    server = _stdio(places["elsewhere"], "--workspace", str(project))
    plan = _plan(server, "named", roots=[places["elsewhere"]], runs_dir="jobs")
    assert plan["run_dir"] == str(project / "jobs" / "named")


def test_without_roots_the_servers_directory_is_the_workspace(places):
    plan = _plan(_stdio(places["project"] / "sub"), "here")
    assert plan["run_dir"] == str(places["project"] / "sub" / "runs" / "here")


def test_in_process_relative_paths_resolve_in_the_workspace_not_the_cwd(places):
    server = build_server(workspace=Workspace(root=places["project"]))
    plan = _plan(server, "inproc", runs_dir="runs")
    assert plan["run_dir"] == str(places["project"] / "runs" / "inproc")


def test_server_info_carries_the_version_and_only_tools_are_advertised():
    async def scenario():
        async with Client(build_server()) as client:
            return client.server_info, client.server_capabilities

    info, capabilities = anyio.run(scenario)
    assert info is not None and info.version == metadata.version("fsdp-eks")
    assert capabilities.tools is not None
    assert capabilities.prompts is None and capabilities.resources is None


def test_http_prints_the_url_it_serves(tmp_path):
    # start_listening: the printed URL is where it answers (on a port it really got).
    process, port = start_listening(
        lambda port: [sys.executable, "-m", "mcp_server", "--http", "--port", str(port)],
        cwd=tmp_path, env=ENV, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert f"http://127.0.0.1:{port}/mcp" in line, line
    finally:
        process.terminate()
        process.wait(timeout=20)


class _Plan:
    """A result whose text is a long plan (a Kubernetes manifest)."""

    next_step = None

    def __init__(self, lines: int) -> None:
        self.manifest = "\n".join(f"line {i}: {'x' * 60}" for i in range(lines))

    def summary_rows(self) -> list:
        return [("status", "planned"), ("manifest", self.manifest)]


def test_a_long_plan_is_never_cut_mid_way_without_a_marker():
    short = summary_text(_Plan(40))
    assert "line 0:" in short and "line 39:" in short and "excerpt" not in short
    long = summary_text(_Plan(400))
    assert "(an excerpt: the last 40 of 400 lines; the whole is structuredContent.manifest)" in (
        long
    )
    assert "line 399:" in long and "line 0:" not in long


def test_a_callers_long_wait_is_cut_to_what_clients_hold(tmp_path):
    server = build_server(workspace=Workspace(root=tmp_path))
    spec = server.spec("get_training_job")
    assert spec is not None
    arguments = server._arguments(spec, {"job_name": "j", "wait_seconds": 600})
    assert arguments["wait_seconds"] == MCP_MAX_WAIT_S <= 45
    left = server._arguments(spec, {"job_name": "j", "wait_seconds": 5})
    assert left["wait_seconds"] == 5


def _analyze(server: Any, **arguments: Any) -> dict:
    async def scenario() -> Any:
        async with Client(server) as client:
            result: Any = await client.call_tool("build_image", {"analyze_only": True, **arguments})
            assert not result.is_error, result.content[0].text
            data = result.structured_content
            return data["result"] if isinstance(data.get("result"), dict) else data, result

    data, result = anyio.run(scenario)
    return {**data, "text": result.content[0].text}


def test_a_project_without_a_dockerfile_gets_the_packaged_trainer_image(places, tmp_path):
    """From the project's subdirectory, no Dockerfile anywhere in it: the trainer image
    this package ships (its Dockerfile and sources assembled from the installed package)."""
    env = {**ENV, "FSDP_EKS_STATE_DIR": str(tmp_path / "state")}
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mcp_server", "--workspace", str(places["project"])],
        cwd=str(places["project"] / "sub"),
        env=env,
    )
    packaged = _analyze(server)
    assert packaged["packaged_trainer"] is True and packaged["status"] == "analyzed"
    assert packaged["resolved"]["torch"]  # the shipped Dockerfile, analyzed
    context = Path(packaged["dockerfile"]).parent
    assert context.is_relative_to(tmp_path / "state")
    for name in ("pyproject.toml", "README.md", "trainer/__main__.py", "mcp_server/server.py"):
        assert (context / name).is_file() and not (context / name).is_symlink(), name
    assert (context / "Dockerfile").read_bytes() == (ROOT / "Dockerfile").read_bytes()
    assert "packaged_trainer: True" in packaged["text"]  # the text says so too

    (places["project"] / "Dockerfile").write_text("FROM python:3.12-slim\n")  # the project's wins
    own = _analyze(server)
    assert own["packaged_trainer"] is False
    assert own["dockerfile"] == str(places["project"] / "Dockerfile")


@pytest.mark.parametrize(
    ("asked", "sent"),
    [(44.9, 44.9), (45, 45), (45.1, 45.0), (300, 45.0), (449, 45.0), (451, 45.0)],
)
def test_the_wait_cap_is_45_s_at_under_and_over_it(tmp_path, asked, sent):
    """Clients give up on a call after 60 s (opencode, the TypeScript SDK): a wait is cut
    to 45 s, whatever the constant's name; 300 and 449 s are cut too, not only 600."""
    server = build_server(workspace=Workspace(root=tmp_path))
    spec = server.spec("get_training_job")
    assert spec is not None
    arguments = server._arguments(spec, {"job_name": "j", "wait_seconds": asked})
    assert arguments["wait_seconds"] == sent


def _first_call(roots: list[Path], workspace: Workspace) -> Any:
    async def list_roots(_context: Any) -> ListRootsResult:
        return ListRootsResult(roots=[Root.model_validate({"uri": r.as_uri()}) for r in roots])

    async def scenario() -> Any:
        server = build_server(workspace=workspace)
        async with Client(server, mode="legacy", list_roots_callback=list_roots) as client:
            return await client.call_tool("deploy_training_job", {"job_name": "r", **JOB})

    return anyio.run(scenario)


def test_a_client_root_missing_on_the_server_is_passed_over_for_one_that_is_here(places):
    """A client on another machine names its own paths first: the first root that is a
    directory here is the workspace; one that is not never is (it would fail every call
    that writes under it)."""
    missing = places["project"] / "not-on-this-machine"
    unnamed = Workspace(root=places["elsewhere"], chosen=False)
    result = _first_call([missing, places["project"]], unnamed)
    assert not result.is_error, result.content[0].text
    assert result.structured_content["plan"]["run_dir"] == str(places["project"] / "runs" / "r")
    only_missing = _first_call([missing], unnamed)
    assert only_missing.is_error
    error = json.loads(only_missing.content[0].text)["error"]
    assert error["code"] == "not_found"
    assert f"not directories on this server: {missing}" in error["message"]
    assert not missing.exists() and not any(places["elsewhere"].iterdir())


@pytest.mark.parametrize(("answer_s", "rooted"), [(4.0, True), (6.0, False)])
def test_a_client_slower_than_5_s_to_name_its_roots_leaves_the_servers_directory(
    places, answer_s, rooted
):
    """roots/list is asked on the first call and waited for 5 s (ROOTS_TIMEOUT_S): a
    client's first call is never held longer by it; an answer in time is used."""

    async def list_roots(_context: Any) -> ListRootsResult:
        await anyio.sleep(answer_s)
        return ListRootsResult(roots=[Root.model_validate({"uri": places["project"].as_uri()})])

    async def scenario() -> Any:
        server = build_server(workspace=Workspace(root=places["elsewhere"], chosen=False))
        async with Client(server, mode="legacy", list_roots_callback=list_roots) as client:
            return await client.call_tool("deploy_training_job", {"job_name": "t", **JOB})

    result = anyio.run(scenario)
    assert not result.is_error, result.content[0].text
    where = places["project"] if rooted else places["elsewhere"]
    assert result.structured_content["plan"]["run_dir"] == str(where / "runs" / "t")
