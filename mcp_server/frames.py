"""One JSON-RPC frame as a transport received it (a stdio line, an HTTP POST body),
checked before any parser sees it, so that any bytes get a JSON-RPC error reply and the
server goes on serving. A frame is accepted when it is

- at most MAX_FRAME_BYTES (1 MiB: a tool call's arguments are a few KB; the transports
  read past a longer frame without holding it whole);
- UTF-8, whose strings are valid Unicode (no lone surrogate such as `\\ud800`);
- nested at most MAX_DEPTH brackets deep (counted in one linear pass: Python's json and
  pydantic recurse, and a 1000-deep line once ended the stdio server);
- one JSON-RPC 2.0 message, a JSON object: a batch (a JSON array) is refused, as MCP
  has done since 2025-06-18.

A frame that is not JSON gets -32700 (parse error), one that is JSON but no message
-32600 (invalid request); the reply carries the request's id when a plain one can be
read, else null. The frame itself is never echoed: it may hold anything."""

from __future__ import annotations

import json
from typing import Any

import anyio.to_thread
import mcp_types as types
from pydantic import ValidationError

from skills.shared.reading import ReadRefused, check_nesting

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
MAX_FRAME_BYTES = 1 << 20
MAX_DEPTH = 64
# A frame this big is checked on a worker thread (1 MiB takes about 0.1 s: the event
# loop, which serves every session, does not wait on it).
_ON_LOOP_BYTES = 64 * 1024
# An HTTP body over the limit is read (and dropped) up to this much before the answer.
_READ_PAST_BYTES = 16 * MAX_FRAME_BYTES
_MAX_ID_CHARS = 256
_UNICODE = "strings must be valid Unicode: no lone surrogates such as \\ud800"


class FrameRefused(Exception):
    """A frame that is not one JSON-RPC message; `reply` is what the client gets."""

    def __init__(self, code: int, message: str, request_id: int | str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.request_id = request_id

    @property
    def reply(self) -> types.JSONRPCError:
        return types.JSONRPCError(
            jsonrpc="2.0",
            id=self.request_id,
            error=types.ErrorData(code=self.code, message=f"Malformed request: {self}"),
        )


def too_large() -> FrameRefused:
    return FrameRefused(
        INVALID_REQUEST, f"larger than {MAX_FRAME_BYTES} bytes, this server's limit per message."
    )


def parse_frame(frame: bytes) -> types.JSONRPCMessage:
    """The frame's message; FrameRefused (with its reply) for anything else."""
    if len(frame) > MAX_FRAME_BYTES:
        raise too_large()
    try:
        text = frame.decode("utf-8")
    except UnicodeDecodeError:
        raise FrameRefused(PARSE_ERROR, "not valid JSON (not UTF-8).") from None
    try:
        check_nesting(text, "message", "the request", MAX_DEPTH)
    except ReadRefused:
        raise FrameRefused(
            PARSE_ERROR, f"not valid JSON for this server (nested deeper than {MAX_DEPTH})."
        ) from None
    parsed = _loads(text)  # pydantic refuses \ud800, Python's json takes it: the id
    if isinstance(parsed, list):
        raise FrameRefused(
            INVALID_REQUEST, "a batch (a JSON array) is not accepted; send one message per frame."
        )
    if isinstance(parsed, dict) and "id" in parsed and not _is_id(parsed["id"]):
        # Else the SDK reads it as a notification, and the client waits for a reply.
        raise FrameRefused(INVALID_REQUEST, "the id must be an integer or a string.")
    try:
        return types.jsonrpc_message_adapter.validate_json(text, by_name=False)
    except ValidationError as exc:
        invalid_json = any(error["type"] == "json_invalid" for error in exc.errors())
    if invalid_json or parsed is _NOT_JSON:
        raise FrameRefused(PARSE_ERROR, f"not valid JSON ({_UNICODE}).", _plain_id(parsed))
    raise FrameRefused(INVALID_REQUEST, "not a valid JSON-RPC 2.0 message.", _plain_id(parsed))


async def parse_frame_off_loop(frame: bytes) -> types.JSONRPCMessage:
    """parse_frame, a big frame on a worker thread."""
    if len(frame) <= _ON_LOOP_BYTES:
        return parse_frame(frame)
    return await anyio.to_thread.run_sync(parse_frame, frame)


_NOT_JSON = object()


def _loads(text: str) -> Any:
    try:
        return json.loads(text)  # at most MAX_DEPTH deep here: no RecursionError
    except ValueError:
        return _NOT_JSON


def _is_id(found: Any) -> bool:
    """MCP's request ids: an integer or a string (never null, a bool or a fraction)."""
    return isinstance(found, str) or (isinstance(found, int) and not isinstance(found, bool))


def _plain_id(parsed: Any) -> int | str | None:
    """The request's id when a reply can carry it: an int, or a short string of valid
    Unicode; else None (JSON-RPC's id for an unreadable request)."""
    found = parsed.get("id") if isinstance(parsed, dict) else None
    if isinstance(found, int) and not isinstance(found, bool):
        return found
    if isinstance(found, str) and len(found) <= _MAX_ID_CHARS:
        try:
            found.encode("utf-8")
        except UnicodeEncodeError:
            return None
        return found
    return None


class CheckedFrames:
    """ASGI middleware before the SDK's streamable HTTP app: a POST whose body is not one
    JSON-RPC message is answered here, 400 (413 over MAX_FRAME_BYTES, never held whole)
    with its JSON-RPC error, and never reaches the SDK (whose answers differ: -32602 for
    a batch, the body echoed in the message, any size up to 4 MiB)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        body, ended = await _body(scope, receive)
        if not ended:  # the client left while sending: no one to answer
            return
        try:
            if body is None:
                raise too_large()
            await parse_frame_off_loop(body)
        except FrameRefused as refused:
            status = 413 if body is None else 400
            reply = refused.reply.model_dump_json(by_alias=True, exclude_unset=True).encode()
            headers = [(b"content-type", b"application/json")]
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": reply})
            return
        replayed = [{"type": "http.request", "body": body, "more_body": False}]

        async def replay() -> dict[str, Any]:
            return replayed.pop(0) if replayed else await receive()

        await self.app(scope, replay, send)


async def _body(scope: dict[str, Any], receive: Any) -> tuple[bytes | None, bool]:
    """(the request's body, whether it came whole); None for a body over MAX_FRAME_BYTES.
    Such a body is read past, never held, up to _READ_PAST_BYTES, so that a client still
    sending it gets the answer; a longer one is answered at once."""
    declared = dict(scope.get("headers") or []).get(b"content-length", b"")
    if declared.isdigit() and int(declared) > _READ_PAST_BYTES:
        return None, True
    body = bytearray()
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return (None if size > MAX_FRAME_BYTES else bytes(body)), False
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_FRAME_BYTES:
            body.clear()
        else:
            body += chunk
        if size > _READ_PAST_BYTES or not message.get("more_body", False):
            return (None if size > MAX_FRAME_BYTES else bytes(body)), True
