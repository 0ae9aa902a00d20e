"""The stdio transport: the SDK's write side (stdout claimed, one JSON line per message),
and a read side of our own that takes any bytes. Each line is one frame, checked by
frames.parse_frame before any parser sees it: a line that is not one JSON-RPC message
(bad JSON or UTF-8, a lone surrogate, too deep, a batch, the wrong shape) gets a
JSON-RPC error reply, and a line over frames.MAX_FRAME_BYTES is read past without being
held whole; blank lines are skipped. The server then reads the next line (the SDK's own
reader left a parse error unanswered, and a 1000-deep line ended the server)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any, cast

import anyio
import anyio.to_thread
from anyio.abc import ObjectSendStream
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage

from mcp_server.frames import MAX_FRAME_BYTES, FrameRefused, parse_frame_off_loop, too_large

_CHUNK = 64 * 1024


@contextmanager
def _claimed_stdin() -> Iterator[int]:
    """A private duplicate of fd 0 to read the wire from, fd 0 itself pointed at the null
    device while serving (as the SDK does for its own reader: a tool's child process
    reads EOF, never a frame). The duplicate is never closed: a worker thread may still
    be blocked reading it when serving ends."""
    private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        yield private
    finally:
        os.dup2(private, 0)


async def lines(fd: int) -> AsyncIterator[bytes | None]:
    """Each line read from `fd` without its newline, or None for a line longer than
    MAX_FRAME_BYTES (never more than that much of a line is held); the last line need not
    end in a newline."""
    held = bytearray()
    skipping = False  # inside a line over the limit: dropped up to its newline
    while chunk := await anyio.to_thread.run_sync(os.read, fd, _CHUNK, abandon_on_cancel=True):
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            piece = chunk[start:end]
            too_long = skipping or len(held) + len(piece) > MAX_FRAME_BYTES
            yield None if too_long else bytes(held + piece)
            held.clear()
            skipping = False
            start = end + 1
        rest = chunk[start:]
        if skipping or len(held) + len(rest) > MAX_FRAME_BYTES:
            skipping = True
            held.clear()
        else:
            held += rest
    if skipping or held:
        yield None if skipping else bytes(held)


async def _read_wire(fd: int, messages: ObjectSendStream[SessionMessage], replies: Any) -> None:
    """Every frame of the wire: a message to the server, anything else an error reply."""
    async with messages:
        async for line in lines(fd):
            if line is not None and not line.strip():
                continue  # a blank line is no frame
            try:
                if line is None:
                    raise too_large()
                message = await parse_frame_off_loop(line)
            except FrameRefused as refused:
                await replies.send(SessionMessage(refused.reply))
                continue
            await messages.send(SessionMessage(message))


async def _no_lines() -> AsyncIterator[str]:
    """The SDK's own reader's input: nothing (ours reads the wire)."""
    return
    yield


async def serve_stdio(server: Any) -> None:
    """Serve `server` over stdio as the SDK's run_stdio_async does, any frame answered."""
    lowlevel = server._lowlevel_server  # what the SDK's own run_stdio_async serves
    with _claimed_stdin() as fd:
        async with stdio_server(stdin=cast(Any, _no_lines())) as (_, write_stream):
            send, receive = anyio.create_memory_object_stream[SessionMessage](0)
            async with anyio.create_task_group() as readers:
                readers.start_soon(_read_wire, fd, send, write_stream)
                await lowlevel.run(receive, write_stream, lowlevel.create_initialization_options())
                readers.cancel_scope.cancel()
