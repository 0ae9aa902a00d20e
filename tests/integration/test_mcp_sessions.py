"""One workspace per client (issue 45, finding 4): with no --workspace, each session's
roots name its own workspace; one session's roots never become another's, relative
paths resolve in the caller's own root, and the operations a session starts run and are
recorded there. Nothing depends on the server process's working directory. The sessions
here are concurrent clients of one in-process server (HTTP: test_mcp_http_access)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import ListRootsResult, Root

from commands.build_image import build_image
from commands.deploy_training_job import deploy_training_job
from commands.inspect_eks_cluster import inspect_eks_cluster
from commands.list_operations import list_operations
from mcp_server import build_server
from mcp_server.workspace import Workspace
from skills.operations import operations
from skills.shared.tooling import spec_of
from tests.sample_tools import count_slowly

pytestmark = pytest.mark.integration

JOB = {"gpu_per_node": 1, "dry_run": True}


@pytest.fixture
def places(tmp_path, monkeypatch) -> dict[str, Path]:
    monkeypatch.setenv(operations.STATE_DIR_ENV, str(tmp_path / "state"))
    paths = {name: tmp_path / name for name in ("server", "a", "b")}
    for path in paths.values():
        path.mkdir()
    for name in ("a", "b"):
        (paths[name] / "own.txt").write_text(f"{name}'s file\n")
        (paths[name] / "marks").mkdir()
    return paths


def _server() -> Any:
    """A server with no --workspace (its own: a directory no client names)."""
    tools = (count_slowly, list_operations, inspect_eks_cluster, deploy_training_job, build_image)
    specs = [spec_of(tool) for tool in tools]
    return build_server(specs=specs, workspace=Workspace(root=Path.cwd(), chosen=False))


def _roots(*paths: Path | str) -> Any:  # the SDK's ListRootsFnT
    async def list_roots(_context: Any) -> ListRootsResult:
        uris = [p if isinstance(p, str) else p.as_uri() for p in paths]
        return ListRootsResult(roots=[Root.model_validate({"uri": u}) for u in uris])

    return list_roots


def _error(result: Any) -> dict:
    assert result.is_error, result.structured_content
    return json.loads(result.content[0].text)["error"]


def _sessions(server: Any, roots: dict[str, list], script) -> dict[str, Any]:
    """Runs `script(name, client)` for every named session at once, all clients open
    together, and returns each one's answer."""
    answers: dict[str, Any] = {}

    async def one(name: str, ready: anyio.Event, go: anyio.Event) -> None:
        callback = _roots(*roots[name])
        async with Client(server, mode="legacy", list_roots_callback=callback) as client:
            ready.set()
            await go.wait()  # every session is open before any calls
            answers[name] = await script(name, client)

    async def all_at_once() -> None:
        go = anyio.Event()
        readies = {name: anyio.Event() for name in roots}
        async with anyio.create_task_group() as group:
            for name in roots:
                group.start_soon(one, name, readies[name], go)
            for ready in readies.values():
                await ready.wait()
            go.set()

    anyio.run(all_at_once)
    return answers


def test_concurrent_sessions_each_plan_in_their_own_root(places):
    async def script(name: str, client: Any) -> dict:
        plans = {}
        for job, extra in (("omitted", {}), ("relative", {"runs_dir": "jobs"})):
            arguments = {"job_name": f"{name}-{job}", **JOB, **extra}
            result = await client.call_tool("deploy_training_job", arguments)
            assert not result.is_error, result.content[0].text
            plans[job] = result.structured_content["plan"]["run_dir"]
        return plans

    answers = _sessions(_server(), {"a": [places["a"]], "b": [places["b"]]}, script)
    for name in ("a", "b"):
        assert answers[name] == {
            "omitted": str(places[name] / "runs" / f"{name}-omitted"),
            "relative": str(places[name] / "jobs" / f"{name}-relative"),
        }


def test_one_sessions_root_is_never_another_sessions_workspace(places):
    """The finding: after one session named file:///, another read /etc/hostname."""

    async def script(name: str, client: Any) -> dict:
        async def read(path: str) -> Any:
            return await client.call_tool(
                "inspect_eks_cluster", {"action": "nccl_test", "nccl_output": path}
            )

        if name == "everything":
            return {"mine": await read("/etc/hostname")}
        return {
            "system": await read("/etc/hostname"),
            "the other's": await read(str(places["a"] / "own.txt")),
            "relative": await read("own.txt"),
        }

    roots = {"everything": ["file:///"], "a": [places["a"]], "b": [places["b"]]}
    answers = _sessions(_server(), roots, script)
    assert not answers["everything"]["mine"].is_error  # its own root: its choice
    assert _error(answers["a"]["system"])["code"] == "path_not_allowed"
    assert _error(answers["b"]["system"])["code"] == "path_not_allowed"
    refused = _error(answers["b"]["the other's"])
    assert refused["code"] == "path_not_allowed" and refused["details"]["roots"] == [
        str(places["b"])
    ]
    for name in ("a", "b"):  # a relative path is read in the caller's own root
        relative = answers[name]["relative"]
        assert not relative.is_error, relative.content[0].text


def test_a_sessions_operations_run_and_are_recorded_in_its_own_root(places):
    async def script(name: str, client: Any) -> dict:
        started = await client.call_tool(
            "count_slowly",
            {"steps": 1, "marker_dir": "marks", "label": name, "wait_seconds": 30},
        )
        listed = await client.call_tool("list_operations", {})
        return {"started": started.structured_content, "listed": listed.structured_content}

    answers = _sessions(_server(), {"a": [places["a"]], "b": [places["b"]]}, script)
    for name, other in (("a", "b"), ("b", "a")):
        state = answers[name]["started"]
        assert state["status"] == "succeeded", state
        record = operations._read(state["operation_id"])
        assert record.workspace == str(places[name]) and record.cwd == str(places[name])
        # The worker ran in the session's root: its relative marker_dir is the root's.
        assert (places[name] / "marks" / "label").read_text() == name
        listed = [op["operation_id"] for op in answers[name]["listed"]["operations"]]
        assert state["operation_id"] in listed
        assert answers[other]["started"]["operation_id"] not in listed


def test_a_tools_project_default_is_the_sessions_own(places):
    """build_image with no Dockerfile named takes the project's: each session's own."""
    bases = {"a": "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime",
             "b": "pytorch/pytorch:2.4.1-cuda12.1-cudnn9-devel"}  # fmt: skip
    for name, base in bases.items():
        (places[name] / "Dockerfile").write_text(f"FROM {base}\n")

    async def script(_name: str, client: Any) -> dict:
        result = await client.call_tool("build_image", {"analyze_only": True, "wait_seconds": 40})
        assert not result.is_error, result.content[0].text
        return result.structured_content["result"]

    answers = _sessions(_server(), {"a": [places["a"]], "b": [places["b"]]}, script)
    for name, base in bases.items():
        assert answers[name]["dockerfile"] == str(places[name] / "Dockerfile")
        assert answers[name]["resolved"]["base_image"] == base


def test_a_client_root_missing_on_the_server_is_a_clear_error(places, tmp_path):
    absent = tmp_path / "not-on-this-server"

    async def script(_name: str, client: Any) -> list:
        return [
            await client.call_tool("deploy_training_job", {"job_name": f"j{i}", **JOB})
            for i in range(2)
        ]

    answers = _sessions(_server(), {"remote": [absent]}, script)
    for result in answers["remote"]:  # every call says so; none crashes or runs elsewhere
        error = _error(result)
        assert error["code"] == "not_found" and str(absent) in error["message"]
        assert "--workspace" in error["hint"]
    assert not absent.exists()


def test_a_missing_root_is_skipped_for_one_that_exists(places, tmp_path):
    async def script(_name: str, client: Any) -> str:
        result = await client.call_tool("deploy_training_job", {"job_name": "j", **JOB})
        assert not result.is_error, result.content[0].text
        return result.structured_content["plan"]["run_dir"]

    answers = _sessions(_server(), {"s": [tmp_path / "absent", places["b"]]}, script)
    assert answers["s"] == str(places["b"] / "runs" / "j")
