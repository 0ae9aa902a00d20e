"""The MCP server's own contract, shown with small test tools registered the same way
as the real ones: the default wait for agents, work off the event loop, progress,
and what a crash looks like to the client."""

from __future__ import annotations

import json
import threading
import time

import anyio
import pytest
from mcp import Client

from mcp_server import build_server
from mcp_server.listing import SELF_NAMED
from mcp_server.server import MCP_DEFAULT_WAIT_S
from skills.shared.progress import Cancelled, Progress
from skills.shared.results import ToolResult
from skills.shared.tooling import WaitSeconds, spec_of, tool
from tests.stdio_replies import read_replies


class Echo(ToolResult):
    wait_seconds: float | None = None


@tool(read_only=True, long=True)
def echo_wait(*, wait_seconds: WaitSeconds = None, progress: Progress | None = None) -> Echo:
    """Returns the wait it was given."""
    return Echo(wait_seconds=wait_seconds)


RELEASE = threading.Event()


@tool(read_only=True)
def blocks_until_released(*, progress: Progress | None = None) -> Echo:
    """Blocks its thread until the test releases it."""
    progress.report(1, 2, "waiting")
    if not RELEASE.wait(timeout=20):
        raise RuntimeError("never released")
    progress.report(2, 2, "released")
    return Echo()


@tool(read_only=True)
def crashes(*, progress: Progress | None = None) -> Echo:
    """A bug, not an expected failure."""
    raise RuntimeError("internal detail /secret/path")


STOPPED = threading.Event()


@tool(read_only=True, long=True)
def follows_until_cancelled(
    *, wait_seconds: WaitSeconds = None, progress: Progress | None = None
) -> Echo:
    """Follows something for a minute, reporting as it goes (like get_training_job)."""
    try:
        for done in range(1200):
            progress.report(done, None, "following")
            time.sleep(0.05)
    except Cancelled:
        STOPPED.set()
        raise
    return Echo()


def _server():
    tools = (echo_wait, blocks_until_released, crashes, follows_until_cancelled)
    return build_server(specs=[spec_of(f) for f in tools])


def test_agents_get_a_bounded_wait_unless_they_ask_otherwise():
    async def scenario():
        async with Client(_server()) as client:
            default = await client.call_tool("echo_wait", {})
            explicit = await client.call_tool("echo_wait", {"wait_seconds": 5})
            unbounded = await client.call_tool("echo_wait", {"wait_seconds": None})
            return default, explicit, unbounded

    default, explicit, unbounded = anyio.run(scenario)
    assert default.structured_content == {"wait_seconds": MCP_DEFAULT_WAIT_S}
    assert explicit.structured_content == {"wait_seconds": 5}
    assert unbounded.structured_content == {"wait_seconds": None}
    assert echo_wait().wait_seconds is None  # Python and the CLI follow to the end


def test_blocking_tools_run_off_the_event_loop_and_stream_progress():
    RELEASE.clear()
    reports = []

    async def on_progress(progress, total, message):
        reports.append((progress, total, message))

    async def scenario():
        with anyio.fail_after(30):
            async with Client(_server()) as client, anyio.create_task_group() as group:
                results = {}

                async def call():
                    results["blocked"] = await client.call_tool(
                        "blocks_until_released", {}, progress_callback=on_progress
                    )

                group.start_soon(call)
                # Answered while the tool's thread is still blocked: the loop is free.
                listing = await client.list_tools()
                assert "blocks_until_released" in [t.name for t in listing.tools]
                RELEASE.set()
            return results["blocked"]

    result = anyio.run(scenario)
    assert not result.is_error
    assert reports == [(1, 2, "waiting"), (2, 2, "released")]


def test_a_crash_is_an_error_result_without_internal_details():
    async def scenario():
        async with Client(_server()) as client:
            return await client.call_tool("crashes", {})

    result = anyio.run(scenario)
    assert result.is_error
    assert "crashes" in result.content[0].text
    assert "/secret/path" not in result.content[0].text


@pytest.mark.parametrize("read_only", [False, True])
def test_every_tool_publishes_descriptions_and_annotations(read_only):
    async def scenario():
        async with Client(build_server(read_only=read_only)) as client:
            return (await client.list_tools()).tools

    tools = anyio.run(scenario)
    assert tools
    for listed in tools:
        assert listed.description
        assert listed.annotations.read_only_hint is not None
        properties = listed.input_schema["properties"]
        targets = properties.get("target", {}).get("enum", [])
        for name, schema in properties.items():
            # A standard term (max_steps, region) is its own doc; a target's settings
            # object is named by its target (`target`'s enum, which is described).
            assert schema.get("description") or name in SELF_NAMED or name in targets, (
                listed.name,
                name,
            )
        # An object schema with its key field typed: every client can validate
        # structuredContent against it (issue 32), at a few dozen bytes a tool.
        assert listed.output_schema is not None and listed.output_schema["type"] == "object"


def test_a_clients_cancel_reaches_a_long_tools_work():
    STOPPED.clear()

    async def scenario():
        async with Client(_server()) as client:
            with anyio.move_on_after(1):  # the client gives up: its call is cancelled
                await client.call_tool(
                    "follows_until_cancelled", {}, progress_callback=lambda *_: anyio.sleep(0)
                )

    anyio.run(scenario)
    # The worker thread saw Cancelled at its next report instead of running a minute on.
    assert STOPPED.wait(timeout=5)


def test_string_grammar_is_checked_by_the_tool_not_listed():
    """tools/list leaves `pattern` and string lengths out (bytes every session pays); a
    call still gets the tool's own check, and the refusal names the field."""

    async def scenario():
        async with Client(build_server()) as client:
            tools = (await client.list_tools()).tools
            refused = [
                await client.call_tool("get_training_job", {"job_name": name, "runs_dir": "r"})
                for name in ("Not A DNS Label", "a" * 64)
            ]
            return tools, refused

    tools, refused = anyio.run(scenario)
    listed = json.dumps([t.input_schema for t in tools])
    for word in ('"pattern"', '"minLength"', '"maxLength"'):
        assert word not in listed
    assert '"minimum"' in listed  # numeric bounds stay: they tell an agent what to choose
    for result in refused:
        error = json.loads(result.content[0].text)["error"]
        assert result.is_error and error["code"] == "invalid_input"
        assert [p["field"] for p in error["details"]["problems"]] == ["job_name"]


# --- a malformed request over stdio gets an answer (issue 20 item 20) -------------------


def _stdio_exchange(lines: list[bytes], tmp_path, replies: int) -> list[dict]:
    """Send raw lines to a real `python -m mcp_server` over stdio; read `replies` lines."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    server = subprocess.Popen(
        [sys.executable, "-m", "mcp_server", "--workspace", str(tmp_path / "ws")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=root,
        env={**os.environ, "FSDP_EKS_STATE_DIR": str(tmp_path / "state")},
    )  # fmt: skip
    assert server.stdin is not None and server.stdout is not None
    try:
        server.stdin.write(b"".join(line + b"\n" for line in lines))
        server.stdin.flush()
        return read_replies(server, replies, timeout=30)
    finally:
        server.kill()
        server.wait(10)


def test_a_lone_surrogate_in_a_request_gets_an_error_reply_over_stdio(tmp_path):
    """A request holding `\\ud800` was never answered: the client waited forever."""
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}}  # fmt: skip
    lines = [
        json.dumps(hello).encode(),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode(),
        b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get_operation",'
        b'"arguments":{"operation_id":"x\\ud800"}}}',
        b'{"jsonrpc":"2.0","id":"q\\udfff","method":"tools/list"}',  # not even its id is plain
        b"{not json",
        json.dumps({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}).encode(),
    ]
    replies = {json.dumps(r.get("id")): r for r in _stdio_exchange(lines, tmp_path, 5)}
    assert replies["2"]["error"]["code"] == -32700 and "surrogate" in replies["2"]["error"][
        "message"]  # fmt: skip
    assert replies["null"]["error"]["code"] == -32700  # the unreadable id and the bad JSON
    assert replies["3"]["result"]["tools"]  # the server still serves
