"""Issue 45, finding 3 and its mechanism, "any bytes on any transport": a real stdio
server process and a real streamable-HTTP server process get malformed, deep, huge and
binary frames, and answer each with a JSON-RPC error (-32700: not JSON; -32600: JSON
but no message; id null where none can be read), then answer a normal call. The
reproduction: one 1000-deep line ended the stdio server (a RecursionError in its own
error reply), and every later call of the session was lost. Then hypothesis draws
frames (FUZZ_EXAMPLES per transport, 40 by default)."""

from __future__ import annotations

import http.client
import itertools
import json
import os
import queue
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mcp_server.frames import INVALID_REQUEST, MAX_FRAME_BYTES, PARSE_ERROR
from tests.services._common import start_listening, stop_process

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "40"))
TOKEN_ENV = "FSDP_EKS_MCP_TOKEN"
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
HELLO = {"jsonrpc": "2.0", "id": "hello", "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "fuzz", "version": "0"}}}  # fmt: skip
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def _json(message: Any) -> bytes:
    return json.dumps(message).encode()


def _deep_request(depth: int) -> bytes:
    """A request whose params nest `depth` objects: its id cannot be read safely."""
    head = b'{"jsonrpc":"2.0","id":7,"method":"ping","params":{"_meta":'
    return head + b'{"a":' * depth + b"1" + b"}" * depth + b"}}"


def _padded_ping(request_id: int, size: int) -> bytes:
    """A valid ping of about `size` bytes (the padding in _meta, which takes any key)."""
    frame = {"jsonrpc": "2.0", "id": request_id, "method": "ping", "params": {"_meta": {}}}
    frame["params"]["_meta"]["pad"] = ""
    frame["params"]["_meta"]["pad"] = "x" * (size - len(_json(frame)))
    return _json(frame)


# (what the frame is, the frame, the JSON-RPC error code and id it is answered with)
REFUSED: list[tuple[str, bytes, int, Any]] = [
    *[(f"arrays nested {d} deep", b"[" * d + b"]" * d, PARSE_ERROR, None)
      for d in (1000, 10_000, 100_000)],
    *[(f"a request nesting {d} objects", _deep_request(d), PARSE_ERROR, None)
      for d in (1000, 10_000, 100_000)],
    ("a request of 3 MiB, over the limit", _padded_ping(8, 3 * MAX_FRAME_BYTES),
     INVALID_REQUEST, None),
    ("a request one byte over the limit", _padded_ping(8, MAX_FRAME_BYTES + 1),
     INVALID_REQUEST, None),
    ("invalid UTF-8", b'{"jsonrpc":"2.0","id":10,"method":"ping","x":"\xff\xfe"}',
     PARSE_ERROR, None),
    ("a NUL byte after a request", b'{"jsonrpc":"2.0","id":11,"method":"ping"}\x00',
     PARSE_ERROR, None),
    ("a NUL byte inside a string", b'{"jsonrpc":"2.0","id":11,"method":"pi\x00ng"}',
     PARSE_ERROR, None),
    ("a lone surrogate", b'{"jsonrpc":"2.0","id":12,"method":"ping","params":{"x":"\\ud800"}}',
     PARSE_ERROR, 12),
    ("binary noise", bytes(range(256)).replace(b"\n", b""), PARSE_ERROR, None),
    ("a batch of one request", b'[{"jsonrpc":"2.0","id":13,"method":"ping"}]',
     INVALID_REQUEST, None),
    ("an empty batch", b"[]", INVALID_REQUEST, None),
    ("a number", b"42", INVALID_REQUEST, None),
    ("a string", b'"tools/list"', INVALID_REQUEST, None),
    ("null", b"null", INVALID_REQUEST, None),
    ("an empty object", b"{}", INVALID_REQUEST, None),
    ("JSON-RPC 1.0", b'{"jsonrpc":"1.0","id":14,"method":"ping"}', INVALID_REQUEST, 14),
    ("a boolean id", b'{"jsonrpc":"2.0","id":true,"method":"ping"}', INVALID_REQUEST, None),
    ("a fractional id", b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', INVALID_REQUEST, None),
    ("a null id", b'{"jsonrpc":"2.0","id":null,"method":"ping"}', INVALID_REQUEST, None),
    ("an id that is an object", b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}',
     INVALID_REQUEST, None),
    ("a method that is a number", b'{"jsonrpc":"2.0","id":15,"method":5}',
     INVALID_REQUEST, 15),
    ("neither a method nor a result", b'{"jsonrpc":"2.0","id":16}', INVALID_REQUEST, 16),
    ("a notification whose params are a string",
     b'{"jsonrpc":"2.0","method":"notifications/progress","params":"nope"}',
     INVALID_REQUEST, None),
    ("params that are a string", b'{"jsonrpc":"2.0","id":18,"method":"tools/call","params":"x"}',
     INVALID_REQUEST, 18),
    ("params that are a list", b'{"jsonrpc":"2.0","id":19,"method":"ping","params":[1,2]}',
     INVALID_REQUEST, 19),
    # The frame is a message: the server itself answers.
    ("an unknown method", b'{"jsonrpc":"2.0","id":17,"method":"no/such/method"}',
     METHOD_NOT_FOUND, 17),
    ("a tool call naming a number", b'{"jsonrpc":"2.0","id":20,"method":"tools/call",'
     b'"params":{"name":5}}', INVALID_PARAMS, 20),
    ("a tool call whose arguments are a list", b'{"jsonrpc":"2.0","id":21,"method":"tools/call",'
     b'"params":{"name":"list_operations","arguments":[1]}}', INVALID_PARAMS, 21),
]  # fmt: skip

# Valid messages that get no reply (notifications, a response to nothing): the server
# reads on.
SILENT: list[tuple[str, bytes]] = [
    ("a cancel of a request id that is an object",
     b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":{"x":[1]}}}'),
    ("a progress notification with no token",
     b'{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":"much"}}'),
    ("an unknown notification", b'{"jsonrpc":"2.0","method":"notifications/no_such"}'),
    ("initialized again, with params", b'{"jsonrpc":"2.0","method":"notifications/initialized",'
     b'"params":{"x":1}}'),
    ("a response to no request", b'{"jsonrpc":"2.0","id":999,"result":{}}'),
]  # fmt: skip

# Frames that are no message at all: skipped on stdio (a blank line is no frame), a
# parse error over HTTP (an empty POST body).
BLANK: list[tuple[str, bytes]] = [("an empty frame", b""), ("spaces", b"   \t ")]

# What a random frame may be answered with.
ANSWER_CODES = {PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS}


# --- the two transports, as a client drives them --------------------------------------


class Stdio:
    """`python -m mcp_server` over its stdin and stdout, one reader thread for all of
    its lines (tests/stdio_replies.py: select() on a buffered pipe loses lines)."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.ids = itertools.count()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in iter(self.process.stdout.readline, b""):
            self.lines.put(line)
        self.lines.put(None)  # the server ended

    def send(self, frame: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(frame + b"\n")
        self.process.stdin.flush()

    def replies_until(self, request_id: Any, timeout: float = 60) -> list[dict]:
        """Every reply up to and with the one to `request_id`."""
        got: list[dict] = []
        while True:
            try:
                line = self.lines.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no reply to {request_id!r} in {timeout} s: {got}") from None
            assert line is not None, f"the server ended (exit {self.process.wait(10)}): {got}"
            got.append(json.loads(line))
            if got[-1].get("id") == request_id and "method" not in got[-1]:
                return got

    def exchange(self, frame: bytes, request_id: Any = None) -> tuple[list[dict], dict]:
        """(the replies the frame got, the answer to a normal call sent after it). A
        request the server itself answers (not the transport) may be answered after the
        call: with its `request_id`, that reply is waited for too."""
        probe = f"probe-{next(self.ids)}"
        self.send(frame)
        self.send(_json({"jsonrpc": "2.0", "id": probe, "method": "tools/list"}))
        *replies, answer = self.replies_until(probe)
        if request_id is not None and all(reply.get("id") != request_id for reply in replies):
            replies += self.replies_until(request_id)
        return replies, answer


class Http:
    """A streamable-HTTP session of `python -m mcp_server --http`, with the bearer
    token the server was started with; a connection per request (the server closes one
    whose body it did not read)."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
        }
        self.ids = itertools.count()
        status, _, session = self._post(_json(HELLO))
        assert status == 200 and session, status
        self.headers["mcp-session-id"] = session
        self.headers["mcp-protocol-version"] = "2025-06-18"
        assert self.post(_json(INITIALIZED))[0] == 202

    def _post(self, frame: bytes) -> tuple[int, list[dict], str | None]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            connection.request("POST", "/mcp", body=frame, headers=self.headers)
            response = connection.getresponse()
            text = response.read().decode()
            kind = response.getheader("content-type") or ""
            session = response.getheader("mcp-session-id")
        finally:
            connection.close()
        if kind.startswith("text/event-stream"):
            data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
            return response.status, [json.loads(item) for item in data if item], session
        return response.status, [json.loads(text)] if text.strip() else [], session

    def post(self, frame: bytes) -> tuple[int, list[dict]]:
        """(the status, the JSON-RPC messages of the answer: its body or its events)."""
        status, messages, _ = self._post(frame)
        return status, messages

    def exchange(self, frame: bytes) -> tuple[int, list[dict], dict]:
        """(the frame's status and replies, the answer to a normal call after it)."""
        status, replies = self.post(frame)
        probe = f"probe-{next(self.ids)}"
        probe_status, answers = self.post(
            _json({"jsonrpc": "2.0", "id": probe, "method": "tools/list"})
        )
        assert probe_status == 200, (probe_status, answers)
        (answer,) = [a for a in answers if a.get("id") == probe]
        return status, replies, answer


def _env(tmp_path: Path, token: str) -> dict[str, str]:
    return {**os.environ, "FSDP_EKS_STATE_DIR": str(tmp_path / "state"), TOKEN_ENV: token}


@contextmanager
def stdio_server(tmp_path: Path) -> Iterator[Stdio]:
    process = subprocess.Popen(
        [sys.executable, "-m", "mcp_server", "--workspace", str(tmp_path / "ws")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        cwd=ROOT, env=_env(tmp_path, ""),
    )  # fmt: skip
    try:
        wire = Stdio(process)
        wire.send(_json(HELLO))
        assert "result" in wire.replies_until("hello")[-1]
        wire.send(_json(INITIALIZED))
        yield wire
    finally:
        stop_process(process)


@contextmanager
def http_server(tmp_path: Path) -> Iterator[Http]:
    token = secrets.token_urlsafe(24)
    process, port = start_listening(
        lambda port: [sys.executable, "-m", "mcp_server", "--http", "--host", "127.0.0.1",
                      "--port", str(port), "--workspace", str(tmp_path / "ws")],
        cwd=ROOT, env=_env(tmp_path, token),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield Http(port, token)
    finally:
        stop_process(process)


@pytest.fixture(scope="module")
def over_stdio(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stdio]:
    with stdio_server(tmp_path_factory.mktemp("stdio")) as wire:
        yield wire


@pytest.fixture(scope="module")
def over_http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Http]:
    with http_server(tmp_path_factory.mktemp("http")) as wire:
        yield wire


def _served(answer: dict) -> None:
    """A normal call after the frame was answered in full."""
    assert answer["result"]["tools"], answer


def _the_error(replies: list[dict], code: int, request_id: Any) -> None:
    assert [r.get("error", {}).get("code") for r in replies] == [code], replies
    assert replies[0]["id"] == request_id and replies[0]["jsonrpc"] == "2.0", replies


# --- the frames each transport is sent -------------------------------------------------


@pytest.mark.parametrize(("what", "frame", "code", "request_id"), REFUSED,
                         ids=[case[0] for case in REFUSED])  # fmt: skip
def test_a_malformed_frame_over_stdio_gets_its_error_and_the_server_serves_on(
    over_stdio, what, frame, code, request_id
):
    replies, answer = over_stdio.exchange(frame, request_id)
    _the_error(replies, code, request_id)
    _served(answer)


@pytest.mark.parametrize(("what", "frame", "code", "request_id"), REFUSED,
                         ids=[case[0] for case in REFUSED])  # fmt: skip
def test_a_malformed_frame_over_http_gets_its_error_and_the_server_serves_on(
    over_http, what, frame, code, request_id
):
    status, replies, answer = over_http.exchange(frame)
    _the_error(replies, code, request_id)
    by_server = code in (METHOD_NOT_FOUND, INVALID_PARAMS)
    expected = 200 if by_server else 413 if len(frame) > MAX_FRAME_BYTES else 400
    assert status == expected, (status, replies)
    _served(answer)


@pytest.mark.parametrize(("what", "frame"), SILENT, ids=[case[0] for case in SILENT])
def test_a_notification_or_response_with_bad_params_is_read_past(
    over_stdio, over_http, what, frame
):
    replies, answer = over_stdio.exchange(frame)
    assert replies == []
    _served(answer)
    status, replies, answer = over_http.exchange(frame)
    assert (status, replies) == (202, [])
    _served(answer)


@pytest.mark.parametrize(("what", "frame"), BLANK, ids=[case[0] for case in BLANK])
def test_a_blank_frame_is_skipped_on_stdio_and_a_parse_error_over_http(
    over_stdio, over_http, what, frame
):
    replies, answer = over_stdio.exchange(frame)
    assert replies == []
    _served(answer)
    status, replies, answer = over_http.exchange(frame)
    assert status == 400
    _the_error(replies, PARSE_ERROR, None)
    _served(answer)


def test_a_frame_just_under_the_limit_is_served(over_stdio, over_http):
    frame = _padded_ping(9, MAX_FRAME_BYTES)
    assert len(frame) == MAX_FRAME_BYTES
    replies, answer = over_stdio.exchange(frame)
    assert replies == [{"jsonrpc": "2.0", "id": 9, "result": {}}]
    status, replies, _ = over_http.exchange(frame)
    assert status == 200 and replies == [{"jsonrpc": "2.0", "id": 9, "result": {}}]


def test_a_chunked_body_over_the_limit_is_refused_without_being_read_whole(over_http):
    connection = http.client.HTTPConnection("127.0.0.1", over_http.port, timeout=60)
    try:
        chunks = (b"[" * (1 << 16) for _ in range(64))  # 4 MiB, no Content-Length
        connection.request("POST", "/mcp", body=chunks, headers=over_http.headers,
                           encode_chunked=True)  # fmt: skip
        response = connection.getresponse()
        status, reply = response.status, json.loads(response.read())
    finally:
        connection.close()
    assert status == 413 and reply["error"]["code"] == INVALID_REQUEST, reply
    _served(over_http.exchange(_json({"jsonrpc": "2.0", "method": "notifications/x"}))[2])


def test_a_huge_line_is_read_past_without_being_held(over_stdio):
    """64 MiB in one line: refused, and the server's peak memory does not grow by it."""
    before = _peak_kib(over_stdio.process.pid)
    chunk = b"x" * (1 << 20)
    assert over_stdio.process.stdin is not None
    for _ in range(64):
        over_stdio.process.stdin.write(chunk)
    replies, answer = over_stdio.exchange(b"")  # the newline that ends it, then a call
    _the_error(replies, INVALID_REQUEST, None)
    _served(answer)
    assert _peak_kib(over_stdio.process.pid) - before < 16 * 1024  # 64 MiB held would show


def _peak_kib(pid: int) -> int:
    """The process's peak resident memory (VmHWM), in KiB."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    return int(next(line for line in status if line.startswith("VmHWM:")).split()[1])


# --- random frames --------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                               max_size=4),
    max_leaves=20,
)  # fmt: skip
MESSAGES = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0", 2]),
        "id": st.integers() | st.text(max_size=10) | st.none() | st.booleans(),
        "method": st.sampled_from(["ping", "tools/list", "no/such", "notifications/progress",
                                   "notifications/cancelled", "notifications/message"]),
        "params": JSON_VALUES,
        "result": JSON_VALUES,
        "error": JSON_VALUES,
    },
)  # fmt: skip
FRAMES = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=200).map(lambda text: text.encode("utf-8", "surrogatepass")),
    JSON_VALUES.map(_json),
    MESSAGES.map(_json),
    st.tuples(st.sampled_from(["[", "{\"a\":", "[{\"b\":["]), st.integers(1, 20_000)).map(
        lambda shape: (shape[0] * shape[1]).encode()),
)  # fmt: skip
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])  # fmt: skip


def _well_formed(reply: dict) -> None:
    assert reply.get("jsonrpc") == "2.0", reply
    if "error" in reply:
        assert reply["error"]["code"] in ANSWER_CODES, reply


def test_random_frames_never_end_the_stdio_server(tmp_path):
    with stdio_server(tmp_path) as wire:

        @FUZZ
        @given(FRAMES)
        def one(frame: bytes) -> None:
            replies, answer = wire.exchange(frame)
            for reply in replies:
                _well_formed(reply)
            _served(answer)

        one()


def test_random_frames_never_end_the_http_server(tmp_path):
    with http_server(tmp_path) as wire:

        @FUZZ
        @given(FRAMES)
        def one(frame: bytes) -> None:
            status, replies, answer = wire.exchange(frame)
            assert status in (200, 202, 400, 413), (status, replies)
            for reply in replies:
                _well_formed(reply)
            _served(answer)

        one()
