"""Who may drive `python -m mcp_server --http` (issue 45, findings 4, 5, 14, 18): on every
address it binds, a request must carry the server's token, name the server in Host and
come from no web page but the server's own origin; the token never travels in argv; and
each HTTP session works in its own client root, the server process's directory never
moving. Each test starts the real server and speaks HTTP to it."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ListRootsResult, Root

from tests.services._common import free_port, start_listening, stop_process

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("FSDP_EKS_")}
ENV["PYTHONPATH"] = str(ROOT)
TOKEN_ENV = "FSDP_EKS_MCP_TOKEN"
TOKEN = "http-access-test-token-0123456789"
INITIALIZE = json.dumps({
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "probe", "version": "0"}},
}).encode()  # fmt: skip


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@contextmanager
def _serving(
    cwd: Path, *args: str, host: str = "127.0.0.1", env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[Any], int, Path]]:
    """The server listening on `host` (the test's token in its environment unless `env`
    says otherwise); yields it, its port and the file its stderr goes to."""
    log = cwd / f"server-{len(list(cwd.glob('server-*.log')))}.log"
    with log.open("w") as stderr:
        process, port = start_listening(
            lambda port: [sys.executable, "-m", "mcp_server", "--http", "--host", host,
                          "--port", str(port), *args],
            host="127.0.0.1" if host == "localhost" else host, cwd=cwd,
            env={**ENV, TOKEN_ENV: TOKEN} if env is None else env,
            stdout=subprocess.DEVNULL, stderr=stderr,
        )  # fmt: skip
        try:
            yield process, port, log
        finally:
            stop_process(process)


def _status(address: str, port: int, headers: dict[str, str]) -> int:
    """The status an initialize POST gets, with exactly these headers (Host included)."""
    connection = http.client.HTTPConnection(address, port, timeout=20)
    try:
        connection.putrequest("POST", "/mcp", skip_host=True, skip_accept_encoding=True)
        fixed = {"Content-Type": "application/json",
                 "Accept": "application/json, text/event-stream",
                 "Content-Length": str(len(INITIALIZE))}  # fmt: skip
        for name, value in {**fixed, **headers}.items():
            connection.putheader(name, value)
        connection.endheaders(INITIALIZE)
        return connection.getresponse().status
    finally:
        connection.close()


NO_IPV6 = pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
BINDS = ["127.0.0.1", "127.0.0.2", "localhost", pytest.param("::1", marks=NO_IPV6)]


@pytest.mark.parametrize("bind", BINDS)
def test_every_bind_answers_only_its_token_its_names_and_no_other_page(tmp_path, bind):
    """Findings 5 and 18, and the members of their class: another 127/8 address, [::1],
    localhost; a wrong token, none, a spoofed Host, a page on another local port."""
    address = "127.0.0.1" if bind == "localhost" else bind
    with _serving(tmp_path, host=bind) as (_process, port, log):
        own = {"Host": _authority(bind, port)}
        auth = {"Authorization": f"Bearer {TOKEN}"}
        statuses = {
            "no token": _status(address, port, own),
            "a wrong token": _status(address, port, {**own, "Authorization": f"Bearer {TOKEN}x"}),
            "the token without Bearer": _status(address, port, {**own, "Authorization": TOKEN}),
            "a rebinding page's Host": _status(
                address, port, {**auth, "Host": f"attacker.example:{port}"}),
            "a Host naming another port": _status(
                address, port, {**auth, "Host": _authority(bind, 1)}),
            "a page on another local port": _status(
                address, port, {**own, **auth, "Origin": "http://127.0.0.1:1"}),
            "a page on localhost": _status(
                address, port, {**own, **auth, "Origin": f"http://localhost:{port + 1}"}),
            "the client": _status(address, port, {**own, **auth}),
            "the client by localhost": _status(
                address, port, {"Host": f"localhost:{port}", **auth}),
        }  # fmt: skip
    assert statuses == {
        "no token": 401, "a wrong token": 401, "the token without Bearer": 401,
        "a rebinding page's Host": 421, "a Host naming another port": 421,
        "a page on another local port": 403, "a page on localhost": 403,
        "the client": 200, "the client by localhost": 200,
    }  # fmt: skip
    assert TOKEN not in log.read_text()


@pytest.mark.parametrize("flag", [["--token", TOKEN], [f"--token={TOKEN}"]])
def test_a_token_on_the_command_line_is_refused(tmp_path, flag):
    """Finding 14: argv is readable by every local user (ps)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "mcp_server", "--http", "--port", str(free_port()), *flag],
        cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        out, err = process.communicate(timeout=60)
    finally:
        stop_process(process)
    assert process.returncode == 2, err
    assert TOKEN_ENV in err and "--token-file" in err and "ps" in err
    assert TOKEN not in out + err


def _tools(port: int, token: str) -> list[str]:
    async def scenario() -> list[str]:
        headers = {"Authorization": f"Bearer {token}"}
        url = f"http://127.0.0.1:{port}/mcp"
        async with (
            httpx2.AsyncClient(headers=headers) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            return [tool.name for tool in (await client.list_tools()).tools]

    return anyio.run(scenario)


def test_a_token_file_only_its_owner_reads_is_the_token(tmp_path):
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o644)
    done = subprocess.run(
        [sys.executable, "-m", "mcp_server", "--http", "--port", str(free_port()),
         "--token-file", str(path)],
        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "chmod 600" in done.stderr, done.stderr
    path.chmod(0o600)
    with _serving(tmp_path, "--token-file", str(path), env=ENV) as (_process, port, log):
        assert "deploy_training_job" in _tools(port, TOKEN)
        assert _status("127.0.0.1", port, {"Host": f"127.0.0.1:{port}"}) == 401
    assert TOKEN not in log.read_text()


def test_with_no_token_given_one_is_made_and_shown_once(tmp_path):
    """Finding 18: on 127.0.0.1 with no token set, any local account could call every
    tool; now the server makes a token, and only a client given it gets in."""
    with _serving(tmp_path, env=ENV) as (_process, port, log):
        assert _status("127.0.0.1", port, {"Host": f"127.0.0.1:{port}"}) == 401
        lines = log.read_text().splitlines()
        shown = [line.rsplit(" ", 1)[1] for line in lines if "token (shown once)" in line]
        assert len(shown) == 1 and len(shown[0]) >= 32, lines
        assert "deploy_training_job" in _tools(port, shown[0])
    assert log.read_text().count(shown[0]) == 1


def _roots(*paths: Path | str) -> Any:  # the SDK's ListRootsFnT
    async def list_roots(_context: Any) -> ListRootsResult:
        uris = [p if isinstance(p, str) else p.as_uri() for p in paths]
        return ListRootsResult(roots=[Root.model_validate({"uri": u}) for u in uris])

    return list_roots


def test_two_http_sessions_with_different_roots_each_work_in_their_own(tmp_path):
    """Finding 4: the first session's root became every session's workspace, and the
    server's working directory. Here one session names file:/// first; the others, open
    at the same time, still see only their own roots."""
    server_dir, a, b = (tmp_path / name for name in ("server", "a", "b"))
    for path in (server_dir, a, b):
        path.mkdir()
    (a / "own.txt").write_text("a's file\n")

    async def session(roots: list, calls: list[tuple[str, dict]], opened, go) -> list[Any]:
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
            Client(streamable_http_client(url, http_client=http), mode="legacy",
                   list_roots_callback=_roots(*roots)) as client,
        ):  # fmt: skip
            opened.set()
            await go.wait()
            return [await client.call_tool(name, arguments) for name, arguments in calls]

    def plan(job: str, **extra: Any) -> tuple[str, dict]:
        return "deploy_training_job", {"job_name": job, "gpu_per_node": 1, "dry_run": True, **extra}

    def read(path: str) -> tuple[str, dict]:
        return "inspect_eks_cluster", {"action": "nccl_test", "nccl_output": path}

    scripts = {
        "everything": (["file:///"], [read("/etc/hostname")]),
        "a": ([a], [plan("a-job"), read("own.txt")]),
        "b": ([b], [plan("b-job"), plan("b-rel", runs_dir="jobs"), read("/etc/hostname"),
                    read(str(a / "own.txt")), read("own.txt")]),
    }  # fmt: skip
    answers: dict[str, list[Any]] = {}

    async def all_at_once() -> None:
        go = anyio.Event()
        opened = {name: anyio.Event() for name in scripts}

        async def run(name: str) -> None:
            roots, calls = scripts[name]
            answers[name] = await session(roots, calls, opened[name], go)

        async with anyio.create_task_group() as group:
            for name in scripts:
                group.start_soon(run, name)
            for event in opened.values():
                await event.wait()
            go.set()

    with _serving(server_dir) as (process, port, _log):
        url = f"http://127.0.0.1:{port}/mcp"
        anyio.run(all_at_once)
        cwd = Path(os.readlink(f"/proc/{process.pid}/cwd"))
    assert cwd == server_dir  # no session moved the process
    assert not answers["everything"][0].is_error  # its own root: the caller's choice
    a_plan, a_read = answers["a"]
    assert a_plan.structured_content["plan"]["run_dir"] == str(a / "runs" / "a-job")
    assert not a_read.is_error, a_read.content[0].text
    b_plan, b_rel, b_system, b_others, b_relative = answers["b"]
    assert b_plan.structured_content["plan"]["run_dir"] == str(b / "runs" / "b-job")
    assert b_rel.structured_content["plan"]["run_dir"] == str(b / "jobs" / "b-rel")
    for refused in (b_system, b_others):
        error = json.loads(refused.content[0].text)["error"]
        assert refused.is_error and error["code"] == "path_not_allowed", error
        assert error["details"]["roots"] == [str(b)]
    # a's own.txt by a relative name, asked by b: b's root, where there is none.
    missing = json.loads(b_relative.content[0].text)["error"]
    assert b_relative.is_error and str(b / "own.txt") in json.dumps(missing), missing
