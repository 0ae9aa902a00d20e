"""Operations: work that outlives the call runs in a detached worker that records
itself; get_operation / list_operations / cancel_operation read and steer it from
any process, an MCP client's cancel reaches the work, and a dead worker is reported."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import anyio
import psutil
import pytest
from mcp import Client, StdioServerParameters

from commands._cli import run_cli
from commands.cancel_operation import cancel_operation
from commands.get_operation import get_operation
from commands.list_operations import list_operations
from mcp_server import build_server
from mcp_server.workspace import Workspace
from skills.operations import operations, processes
from skills.shared.errors import ToolFailure
from skills.shared.progress import CollectingProgress
from skills.shared.tooling import spec_of
from tests.sample_tools import count_slowly

ROOT = Path(__file__).resolve().parents[2]
COUNT = spec_of(count_slowly)


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv(operations.STATE_DIR_ENV, str(tmp_path / "state"))
    return tmp_path / "state"


def _until(check, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def test_an_operation_runs_detached_and_streams_its_progress():
    progress = CollectingProgress()
    state = operations.call(COUNT, {"steps": 3, "wait_seconds": 60}, progress)
    assert state.status == "succeeded" and state.error is None
    assert state.result.counted == 3  # typed as the tool's own result
    assert state.log_tail == ["counted 1", "counted 2", "counted 3"]
    assert progress.events[-1].completed == 3 and progress.events[-1].total == 3
    record = operations.get(state.operation_id)
    assert record.pid != os.getpid() and record.tool == "count_slowly"
    assert record.entry == "tests.sample_tools:count_slowly"


def test_a_short_wait_returns_running_and_get_operation_follows_it_to_the_end():
    state = operations.call(COUNT, {"steps": 10, "step_s": 0.2, "wait_seconds": 0})
    assert state.status == "running" and state.result is None
    assert state.next_step.tool == "get_operation"
    assert state.next_step.arguments == {"operation_id": state.operation_id, "wait_seconds": 30}
    done = get_operation(operation_id=state.operation_id, wait_seconds=60)
    assert done.status == "succeeded" and done.model_dump()["result"] == {"counted": 10}
    assert done.completed == 10 and done.next_step is None


def test_a_failing_operation_records_the_typed_error():
    state = operations.call(COUNT, {"steps": 5, "fail_at": 2, "wait_seconds": 60})
    assert state.status == "failed" and state.cli_exit_status() == 1
    assert state.error["code"] == "service_error" and state.error["hint"] == "Count less."


def test_an_operation_record_is_masked_and_the_worker_still_gets_the_real_arguments(
    tmp_path, monkeypatch, state_dir
):
    """Issue 20 item 13: operation.json stored arguments unmasked (`_masked` was never
    called). A secret variable's value inside an argument (a dataset URL) is masked in
    the record, its result, progress and log tail; the work ran with the real value."""
    secret = "planted-wandb-secret-0123456789"
    monkeypatch.setenv("WANDB_API_KEY", secret)
    label = f"https://data.example/{secret}/train"
    state = operations.call(COUNT, {"steps": 2, "label": label, "marker_dir": str(tmp_path),
                                    "wait_seconds": 60})  # fmt: skip
    assert state.status == "succeeded"
    assert (tmp_path / "label").read_text() == label  # the worker's call, as given
    record = (state_dir / "operations" / state.operation_id / "operation.json").read_text()
    assert secret not in record and "https://data.example/***/train" in record
    assert secret not in state.model_dump_json()
    assert state.log_tail[-1] == "counted 2 https://data.example/***/train"
    listed = list_operations()
    assert secret not in listed.model_dump_json()


def test_bad_input_fails_before_anything_is_recorded(state_dir):
    with pytest.raises(ToolFailure) as caught:
        operations.call(COUNT, {"steps": "many", "wait_seconds": 0})
    assert caught.value.code == "invalid_input"
    assert not (state_dir / "operations").exists()


def test_cancel_needs_confirm_and_then_reaches_the_work(tmp_path):
    state = operations.call(
        COUNT, {"steps": 300, "step_s": 0.1, "marker_dir": str(tmp_path), "wait_seconds": 0.5}
    )
    with pytest.raises(ToolFailure) as gate:
        cancel_operation(operation_id=state.operation_id)
    assert gate.value.code == "confirmation_required" and gate.value.exit_status == 2
    assert get_operation(operation_id=state.operation_id).status == "running"
    # The worker catches SIGTERM once it runs the tool (its first step reported).
    _until(lambda: get_operation(operation_id=state.operation_id).completed > 0)

    cancelled = cancel_operation(operation_id=state.operation_id, confirm=True)
    assert cancelled.status == "cancelled" and cancelled.error["code"] == "cancelled"
    stopped_at = int((tmp_path / "cancelled-at").read_text())
    assert 0 < stopped_at < 300
    record = operations.get(state.operation_id)
    assert not processes.is_alive(record.pid, record.pid_started)
    # Cancelling again changes nothing.
    assert cancel_operation(operation_id=state.operation_id, confirm=True).status == "cancelled"


def test_a_worker_killed_outright_is_reported_failed_with_its_log():
    state = operations.call(COUNT, {"steps": 300, "step_s": 0.1, "wait_seconds": 0.5})
    record = operations.get(state.operation_id)
    os.killpg(record.pid, signal.SIGKILL)
    failed = _until(
        lambda: (s := get_operation(operation_id=state.operation_id)).status != "running" and s
    )
    assert failed.status == "failed" and failed.error["code"] == "operation_failed"
    assert failed.error["details"]["worker_log"].endswith("worker.log")


def test_list_operations_newest_first_and_filtered():
    first = operations.call(COUNT, {"steps": 1, "wait_seconds": 60})
    second = operations.call(COUNT, {"steps": 100, "step_s": 0.1, "wait_seconds": 0})
    listed = list_operations()
    assert [op.operation_id for op in listed.operations] == [
        second.operation_id,
        first.operation_id,
    ]
    assert [op.operation_id for op in list_operations(status="succeeded").operations] == [
        first.operation_id
    ]
    assert list_operations(tool_name="build_image").operations == []
    cancel_operation(operation_id=second.operation_id, confirm=True)


@pytest.mark.parametrize(
    ("operation_id", "code"),
    [
        ("../../etc", "invalid_input"),
        ("count_slowly-20260101-000000-abcdef", "operation_not_found"),
    ],
)
def test_unknown_or_malformed_ids_are_typed_errors(operation_id, code):
    with pytest.raises(ToolFailure) as caught:
        get_operation(operation_id=operation_id)
    assert caught.value.code == code and caught.value.exit_status == 2 and caught.value.hint


def test_cli_detaches_with_wait_seconds_and_runs_in_process_without(capsys):
    assert run_cli(count_slowly, ["--steps", "50", "--wait_seconds", "0", "--json"]) == 0
    detached = json.loads(capsys.readouterr().out)
    assert detached["status"] == "running" and detached["operation_id"]
    cancel_operation(operation_id=detached["operation_id"], confirm=True)

    assert run_cli(count_slowly, ["--steps", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"counted": 2}
    assert len(list_operations().operations) == 1  # the in-process run recorded nothing


def _server(workspace: Path | None = None):
    if workspace is not None:  # as `python -m mcp_server` makes its workspace: the
        workspace.mkdir(parents=True, exist_ok=True)  # operations' worker runs there
    return build_server(
        specs=[COUNT, spec_of(get_operation), spec_of(list_operations), spec_of(cancel_operation)],
        workspace=None if workspace is None else Workspace.create(str(workspace)),
    )


def test_mcp_answers_an_operation_tool_with_the_operation_state(state_dir):
    # An operation tool's output schema is the bare object its OperationState fits (the
    # key field of its own result is not one the state shares): the state is in the call's
    # structuredContent, its text a summary that names the operation.
    async def scenario():
        async with Client(_server()) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            done = await client.call_tool("count_slowly", {"steps": 1, "wait_seconds": 60})
            return tools, done

    tools, done = anyio.run(scenario)
    assert tools["count_slowly"].output_schema == {"type": "object"}
    assert "wait_seconds" in tools["count_slowly"].input_schema["properties"]
    state = done.structured_content
    assert {"operation_id", "status", "result", "next_step"} <= set(state)
    assert state["status"] == "succeeded" and state["result"] == {"counted": 1}
    assert state["operation_id"] in done.content[0].text


def test_work_started_over_mcp_outlives_the_server_and_a_new_server_finds_it(state_dir, tmp_path):
    # Operations are scoped to the workspace that started them: the new server is given
    # the same workspace (test_operations_are_scoped_to_the_workspace_that_started_them).
    async def start():
        async with Client(_server(tmp_path / "ws")) as client:
            return await client.call_tool("count_slowly", {"steps": 15, "step_s": 0.2,
                                                           "wait_seconds": 0.5})  # fmt: skip

    started = anyio.run(start)
    assert not started.is_error and started.structured_content["status"] == "running"
    operation_id = started.structured_content["operation_id"]

    env = {**os.environ, operations.STATE_DIR_ENV: str(state_dir)}
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mcp_server", "--workspace", str(tmp_path / "ws")],
        cwd=str(ROOT),
        env=env,
    )

    async def follow():
        async with Client(params) as client:
            return await client.call_tool(
                "get_operation", {"operation_id": operation_id, "wait_seconds": 30}
            )

    followed = anyio.run(follow)
    assert not followed.is_error, followed.content
    assert followed.structured_content["status"] == "succeeded"
    assert followed.structured_content["result"] == {"counted": 15}


def test_an_mcp_clients_cancel_reaches_the_operation(tmp_path):
    async def scenario():
        async with Client(_server()) as client:
            with anyio.move_on_after(2):  # the client gives up: its scope is cancelled
                await client.call_tool(
                    "count_slowly",
                    {"steps": 300, "step_s": 0.1, "marker_dir": str(tmp_path), "wait_seconds": 60},
                    progress_callback=lambda *_: anyio.sleep(0),
                )

    anyio.run(scenario)
    (record,) = operations.list_records()
    record = _until(lambda: (r := operations.get(record.operation_id)).status != "running" and r)
    assert record.status == "cancelled"
    assert 0 < int(_until(lambda: (tmp_path / "cancelled-at").exists() and
                          (tmp_path / "cancelled-at").read_text())) < 300  # fmt: skip


# issue 20, item 8: a forged record stops nothing ------------------------------------


def test_a_forged_record_naming_a_live_foreign_process_stops_nothing(state_dir):
    # Not a recycled pid: the record names a live process by its exact pid AND start time.
    foreign = psutil.Popen(["setsid", "sleep", "120"])
    try:
        state = operations.call(COUNT, {"steps": 1, "wait_seconds": 60})
        path = state_dir / "operations" / state.operation_id / "operation.json"
        forged = json.loads(path.read_text())
        forged.update(status="running", ended_at=None, result=None, pid=foreign.pid,
                      pid_started=foreign.create_time())  # fmt: skip
        path.write_text(json.dumps(forged))
        with pytest.raises(ToolFailure) as caught:
            cancel_operation(operation_id=state.operation_id, confirm=True)
        assert caught.value.code == "operation_failed"
        assert caught.value.details["reason"] == "not_our_process"
        assert "nothing was signalled" in caught.value.message
        time.sleep(0.3)
        assert foreign.poll() is None  # alive: not signalled
    finally:
        foreign.kill()
        foreign.wait()


# issue 20, item 19: operations are scoped to the workspace that started them -------


def _call(server, tool: str, arguments: dict):
    async def scenario():
        async with Client(server) as client:
            return await client.call_tool(tool, arguments)

    return anyio.run(scenario)


def test_operations_are_scoped_to_the_workspace_that_started_them(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    started = _call(_server(a), "count_slowly", {"steps": 300, "step_s": 0.1, "wait_seconds": 0})
    operation_id = started.structured_content["operation_id"]
    assert operations.list_records() == []  # the CLI (no workspace) does not see it either

    listed = _call(_server(b), "list_operations", {}).structured_content["operations"]
    assert listed == []
    for tool, extra in (("get_operation", {}), ("cancel_operation", {"confirm": True})):
        refused = _call(_server(b), tool, {"operation_id": operation_id, **extra})
        error = json.loads(refused.content[0].text)["error"]
        assert refused.is_error and error["code"] == "operation_not_found", tool
    with pytest.raises(ToolFailure) as caught:
        cancel_operation(operation_id=operation_id, confirm=True)  # the CLI: unscoped
    assert caught.value.code == "operation_not_found"

    (mine,) = _call(_server(a), "list_operations", {}).structured_content["operations"]
    assert mine["operation_id"] == operation_id and mine["status"] == "running"
    cancelled = _call(_server(a), "cancel_operation", {"operation_id": operation_id,
                                                       "confirm": True})  # fmt: skip
    assert cancelled.structured_content["status"] == "cancelled"


def test_a_server_process_confined_to_another_workspace_sees_nothing(state_dir, tmp_path):
    started = _call(_server(tmp_path / "a"), "count_slowly", {"steps": 2, "wait_seconds": 30})
    operation_id = started.structured_content["operation_id"]
    assert started.structured_content["status"] == "succeeded"
    env = {**os.environ, operations.STATE_DIR_ENV: str(state_dir)}

    def server_process(workspace: Path) -> StdioServerParameters:
        return StdioServerParameters(
            command=sys.executable, args=["-m", "mcp_server", "--workspace", str(workspace)],
            cwd=str(ROOT), env=env,
        )  # fmt: skip

    async def ask(workspace: Path):
        async with Client(server_process(workspace)) as client:
            listed = await client.call_tool("list_operations", {})
            got = await client.call_tool("get_operation", {"operation_id": operation_id})
            return listed.structured_content["operations"], got

    listed, got = anyio.run(ask, tmp_path / "b")
    assert listed == [] and got.is_error and "operation_not_found" in got.content[0].text
    assert "counted" not in got.content[0].text  # the result stays in workspace a
    listed, got = anyio.run(ask, tmp_path / "a")
    assert [op["operation_id"] for op in listed] == [operation_id]
    assert got.structured_content["result"] == {"counted": 2}


@pytest.mark.parametrize(
    "call, mapped",
    [  # a row per way an operation is mapped back onto its caller's result
        ({"steps": 2, "step_s": 0.01, "wait_seconds": 30}, ("ended", 2)),
        ({"steps": 40, "step_s": 0.5, "wait_seconds": 0}, ("running", None)),
        ({"steps": 3, "step_s": 0.01, "fail_at": 2, "wait_seconds": 30}, "service_error"),
    ],
)
def test_run_as_operation_maps_each_end_onto_the_callers_result(call, mapped):
    from tests.sample_tools import Counted

    ran = []

    def running(state):
        ran.append(state.operation_id)
        return ("running", None)

    def ask():
        return operations.run_as_operation(
            COUNT, call, None, result=Counted,
            ended=lambda result, state: ("ended", result.counted),
            running=running, failed="counting failed",
        )  # fmt: skip

    if isinstance(mapped, str):
        with pytest.raises(ToolFailure) as failed:
            ask()
        assert failed.value.code == mapped and failed.value.details["operation_id"]
        return
    assert ask() == mapped
    if ran:  # still running: the caller can stop it by the id it was given
        operations.cancel(ran[0])
