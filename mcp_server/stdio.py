"""The stdio transport, with one addition to the SDK's: a line that is not a valid
JSON-RPC message (bad JSON, a lone surrogate such as `\\ud800` that the parser refuses,
a missing field) gets a JSON-RPC error reply (-32700 / -32600) with the request's id
when it can be read, instead of silence (the SDK passes the parse error on as an
exception that no one answers, and the client waits forever)."""

from __future__ import annotations

import json
from types import TracebackType
from typing import Any

import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
_MAX_ID_CHARS = 256


class AnswerMalformed:
    """The read side of a transport, where an unparsable line is answered on the write
    side and skipped; everything else passes through unchanged."""

    def __init__(self, inner: Any, write_stream: Any) -> None:
        self.inner = inner
        self.write_stream = write_stream

    @property
    def last_context(self) -> Any:
        return getattr(self.inner, "last_context", None)

    async def receive(self) -> Any:
        while True:
            item = await self.inner.receive()
            if not isinstance(item, Exception):
                return item
            await self.write_stream.send(SessionMessage(error_reply(item)))

    def __aiter__(self) -> AnswerMalformed:
        return self

    async def __anext__(self) -> Any:
        import anyio

        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def __aenter__(self) -> AnswerMalformed:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:  # fmt: skip
        await self.aclose()


def error_reply(failure: Exception) -> types.JSONRPCError:
    """The JSON-RPC error for a line the SDK could not parse. The line itself is never
    echoed (it may hold anything); only its id, when it has a plain one."""
    line, kind = _input_of(failure)
    try:
        parsed = json.loads(line) if line is not None else None  # Python's JSON takes \ud800
    except ValueError:
        parsed = None
    code = PARSE_ERROR if kind == "json_invalid" or parsed is None else INVALID_REQUEST
    what = "not valid JSON" if code == PARSE_ERROR else "not a valid JSON-RPC request"
    return types.JSONRPCError(
        jsonrpc="2.0",
        id=_plain_id(parsed),
        error=types.ErrorData(
            code=code,
            message=f"Malformed request: {what} (strings must be valid Unicode: no lone "
            "surrogates such as \\ud800).",
        ),
    )


def _input_of(failure: Exception) -> tuple[str | None, str | None]:
    """(the line, pydantic's error type) from the SDK's validation error, if it is one."""
    if not isinstance(failure, ValidationError):
        return None, None
    try:
        first = failure.errors()[0]
    except IndexError:  # no error listed: no line to read an id from
        return None, None
    found = first.get("input")
    return (found if isinstance(found, str) else None), first.get("type")


def _plain_id(parsed: Any) -> int | str | None:
    """The request's id when it is one a reply can carry: an int, or a short string of
    valid Unicode; else None (JSON-RPC's id for an unreadable request)."""
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


async def serve_stdio(server: Any) -> None:
    """Serve `server` over stdio as the SDK's run_stdio_async does, malformed lines
    answered."""
    lowlevel = server._lowlevel_server  # what the SDK's own run_stdio_async serves
    async with stdio_server() as (read_stream, write_stream):
        await lowlevel.run(
            AnswerMalformed(read_stream, write_stream),
            write_stream,
            lowlevel.create_initialization_options(),
        )
