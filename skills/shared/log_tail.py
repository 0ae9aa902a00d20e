"""The last lines of a log, read from its end in blocks (issue 49): exact at any size.

A log of 1 KB or 1 GB costs the same: blocks are read backwards from the end until the
asked-for lines have started, or until more bytes were read than the budget could ever
show (a line's text costs at least half its bytes: a CRLF line loses its CR). What is
returned is the last lines whole, or fewer of them when the budget holds fewer, and
the byte offset where the first one starts: the cursor for the lines before it. A single
line longer than the budget is shown by its end (never split inside a character), the
offset then pointing inside that line, so the next call shows the part before."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

BLOCK_BYTES = 64 * 1024

# A newline between lines, as a JSON string sends it (\n: two bytes).
SEPARATOR = 2

ReadAt = Callable[[int, int], bytes]  # (offset, size) -> the bytes there


@dataclass
class LastLines:
    lines: list[str]  # decoded (invalid UTF-8 replaced), without their CR or LF
    start: int | None  # the byte offset where the first line (or its part) starts
    earlier: bool  # the log holds bytes before these lines
    cut: bool  # the first line is the end of a line longer than the budget
    bytes_read: int


def text_cost(text: str) -> int:
    """What `text` costs in a JSON result (escapes included, UTF-8 as sent)."""
    return len(json.dumps(text, ensure_ascii=False).encode()) - 2


def last_lines(
    read_at: ReadAt, end: int, count: int, max_bytes: int, block: int = BLOCK_BYTES
) -> LastLines:
    """The last `count` lines of the bytes before `end` (a final newline ends the last
    line, it does not start an empty one), whole and in order, as many as fit in
    `max_bytes` of result text (joined by newlines); reads at most 2 * max_bytes + block."""
    buf = b""
    pos = end
    terminal: bool | None = None  # whether the byte before `end` is a newline
    while pos > 0:
        size = min(block, pos)
        chunk = read_at(pos - size, size)
        if len(chunk) != size:  # the log shrank while read: keep what is contiguous
            break
        pos -= size
        buf = chunk + buf
        if terminal is None:
            terminal = buf.endswith(b"\n")
        body = buf[:-1] if terminal else buf
        if body.count(b"\n") >= count or len(body) > 2 * max_bytes:
            break
    bytes_read = len(buf)
    body = buf[:-1] if terminal else buf
    pieces = body.split(b"\n") if buf or pos > 0 else []
    first = max(0, len(pieces) - count)
    # Where the buffer does not reach the log's start, its first piece is a line's end.
    partial = pos > 0 and first == 0
    kept: list[str] = []
    used = 0
    index = len(pieces)
    cut_at = 0
    for raw in reversed(pieces[first:]):
        text = _decoded(raw)
        cost = text_cost(text) + (SEPARATOR if kept else 0)
        if used + cost > max_bytes or (partial and index - 1 == 0):
            if not kept:  # the last line alone is over the budget: its end
                text, cut_at = _line_end(raw, max_bytes)
                kept.append(text)
                index -= 1
            break
        kept.append(text)
        used += cost
        index -= 1
    kept.reverse()
    start = pos + sum(len(p) + 1 for p in pieces[:index]) + cut_at
    return LastLines(kept, start, start > 0, cut_at > 0 or (partial and index == 0), bytes_read)


def _decoded(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").removesuffix("\r")


def _line_end(raw: bytes, max_bytes: int) -> tuple[str, int]:
    """The end of a line that alone is over `max_bytes`, and how many bytes of it are
    left before (its part shown starts at a character, not inside one)."""
    keep = min(len(raw), max_bytes)
    while True:
        skip = len(raw) - keep
        while skip < len(raw) and raw[skip] & 0xC0 == 0x80:  # a UTF-8 continuation byte
            skip += 1
        text = _decoded(raw[skip:])
        cost = text_cost(text)
        if cost <= max_bytes or keep <= 1:
            return text, skip
        keep = min(keep - 1, keep * max_bytes // cost)
