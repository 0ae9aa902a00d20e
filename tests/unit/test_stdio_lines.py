"""The stdio transport's line reader (mcp_server/stdio.py): every line whole up to
MAX_FRAME_BYTES, wherever the reads split it; a longer one is one None, read past."""

from __future__ import annotations

import os
import threading

import anyio
import pytest

from mcp_server.frames import MAX_FRAME_BYTES
from mcp_server.stdio import lines

LIMIT = MAX_FRAME_BYTES

CASES = [
    ("two short lines", b'{"a":1}\n{"b":2}\n', [b'{"a":1}', b'{"b":2}']),
    ("a last line without its newline", b"x\ny", [b"x", b"y"]),
    ("empty lines, as they are", b"\n\n", [b"", b""]),
    ("nothing", b"", []),
    ("a line of exactly the limit", b"a" * LIMIT + b"\nb\n", [b"a" * LIMIT, b"b"]),
    ("a line one byte over the limit", b"a" * (LIMIT + 1) + b"\nc\n", [None, b"c"]),
    ("a huge line, then a short one", b"z" * (5 * LIMIT) + b"\nd", [None, b"d"]),
    ("a huge last line without its newline", b"z" * (3 * LIMIT), [None]),
    ("two huge lines in a row", (b"z" * (2 * LIMIT) + b"\n") * 2 + b"e\n", [None, None, b"e"]),
]


@pytest.mark.parametrize(("what", "data", "expected"), CASES, ids=[c[0] for c in CASES])
def test_the_reader_yields_each_line_or_none_for_one_over_the_limit(what, data, expected):
    read_end, write_end = os.pipe()

    def feed() -> None:
        # Odd-sized writes: lines and the limit fall across the reader's reads.
        for start in range(0, len(data), 99_991):
            os.write(write_end, data[start : start + 99_991])
        os.close(write_end)

    writer = threading.Thread(target=feed)
    writer.start()

    async def read_all() -> list[bytes | None]:
        return [line async for line in lines(read_end)]

    try:
        assert anyio.run(read_all) == expected
    finally:
        writer.join(10)
        os.close(read_end)
