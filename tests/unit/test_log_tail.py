"""The last lines of a log read from its end in blocks (issue 49 item 4): exact lines for
any count and any size, the budget kept, a cursor for the lines before, and the bytes
read bounded by the budget, not the log (counted, not timed)."""

from __future__ import annotations

import random

import pytest

from skills.shared.log_tail import BLOCK_BYTES, last_lines, text_cost
from skills.shared.reading import read_chunk

KB, MB, GB = 1_000, 1_000_000, 1_000_000_000
BUDGET = 30_000


def reference(data: bytes) -> list[str]:
    """The log's lines as a person reads them: a final newline ends the last line."""
    if not data:
        return []
    body = data[:-1] if data.endswith(b"\n") else data
    return [p.decode("utf-8", errors="replace").removesuffix("\r") for p in body.split(b"\n")]


def fitting(lines: list[str], count: int, budget: int) -> list[str]:
    """The last `count` lines, or the most of them whose text fits in `budget`."""
    kept: list[str] = []
    used = 0
    for line in reversed(lines[-count:] if count else []):
        used += text_cost(line) + (2 if kept else 0)  # a newline sent as \\n
        if used > budget:
            break
        kept.append(line)
    return kept[::-1]


def tail_of(data: bytes, count: int, budget: int = BUDGET, block: int = BLOCK_BYTES):
    return last_lines(lambda at, n: data[at : at + n], len(data), count, budget, block)


EDGES = {
    "an empty log has no lines": (b"", 5, []),
    "a lone newline is one empty line": (b"\n", 5, [""]),
    "no trailing newline keeps the last line": (b"a\nb", 1, ["b"]),
    "a trailing newline starts no empty line": (b"a\nb\n", 1, ["b"]),
    "CRLF lines lose their CR": (b"a\r\nb\r\n", 2, ["a", "b"]),
    "invalid UTF-8 is replaced, not refused": (b"\xff\xfe\nz\n", 2, ["\ufffd\ufffd", "z"]),
    "more lines asked than the log holds gives them all": (b"1\n2\n3\n", 10_000, ["1", "2", "3"]),
    "empty lines in the middle count": (b"a\n\n\nb\n", 3, ["", "", "b"]),
}


@pytest.mark.parametrize("name", list(EDGES))
def test_an_edge_case_gives_exactly_its_last_lines(name):
    data, count, expected = EDGES[name]
    for block in (1, 3, BLOCK_BYTES):  # the block boundary falls anywhere
        found = tail_of(data, count, block=block)
        assert found.lines == expected, (name, block)
        assert not found.cut
        assert found.earlier == (len(reference(data)) > len(expected))


def test_random_logs_give_the_last_lines_that_fit_and_a_cursor_to_the_rest():
    rng = random.Random(49)
    alphabet = [b"a", b"\xc3\xa9", b"\n", b"\r\n", b"\xff", b'"', b"\x01", b"\xe2\x82\xac"]
    for _ in range(400):
        data = b"".join(rng.choice(alphabet) * rng.randint(1, 9) for _ in range(rng.randint(0, 80)))
        count, budget = rng.randint(1, 40), rng.randint(8, 120)
        found = tail_of(data, count, budget, block=rng.randint(1, 50))
        lines = reference(data)
        if found.cut:  # the last line alone is over the budget: its end, marked
            assert len(found.lines) == 1 and text_cost(found.lines[0]) <= budget
            assert text_cost(lines[-1]) > budget
            assert lines[-1].endswith(found.lines[0].lstrip("\ufffd"))
            continue
        assert found.lines == fitting(lines, count, budget), (data, count, budget)
        assert text_cost("\n".join(found.lines)) <= budget
        # The cursor: the lines before it are exactly the log's lines before these.
        assert reference(data[: found.start]) == lines[: len(lines) - len(found.lines)] or (
            found.start == 0 and not lines[: len(lines) - len(found.lines)]
        )


def test_a_line_longer_than_the_budget_comes_in_parts_that_rebuild_it():
    line = ("é" * 7 + "x" * 3) * 20_000  # 200,000 characters, never split inside one
    data = b"first\n" + line.encode() + b"\nlast\n"
    found = tail_of(data, 3)
    assert found.lines[-1] == "last" and not found.cut  # whole lines first
    parts, end = [], found.start
    assert end is not None
    while True:
        part = last_lines(lambda at, n: data[at : at + n], end, 1, BUDGET)
        assert text_cost(part.lines[0]) <= BUDGET and "\ufffd" not in part.lines[0]
        parts.insert(0, part.lines[0])
        if not part.cut:
            break
        assert part.start is not None
        end = part.start
    assert len(parts) > 6 and "".join(parts) == line  # its start comes whole, unmarked
    start = part.start
    assert start is not None and start == len(b"first\n")  # the long line's first byte
    before = last_lines(lambda at, n: data[at : at + n], start, 5, BUDGET)
    assert before.lines == ["first"] and not before.earlier


def _sparse_log(path, size: int, tail_lines: int) -> list[str]:
    """A log of about `size` bytes: a hole (no disk) ended by a newline, then real
    distinct lines (only those where they fill the size)."""
    lines = [f"{i:07d} step loss={i / 7:.5f} " + "x" * (i % 50) for i in range(tail_lines)]
    tail = ("\n".join(lines) + "\n").encode()
    with path.open("wb") as handle:
        if size > 2 * len(tail):  # 1 KB: the lines alone
            handle.truncate(size - len(tail) - 1)
            handle.seek(0, 2)
            handle.write(b"\n")
        handle.write(tail)
    return lines


@pytest.mark.parametrize("size", [1 * KB, 1 * MB, 64 * MB, 1 * GB])
def test_a_log_from_1_kb_to_1_gb_gives_its_exact_last_lines_reading_only_its_end(tmp_path, size):
    log = tmp_path / "attempt-1.log"
    lines = _sparse_log(log, size, tail_lines=min(20_000, size // 34))
    read: list[int] = []

    def read_at(at: int, n: int) -> bytes:
        data = read_chunk(log, at, what="job log", max_bytes=n)
        read.append(len(data))
        return data

    whole = len(fitting(lines, 10_000, BUDGET))  # how many whole lines 30 KB holds
    counts = sorted({1, 2, 3, 10, 99, 100, whole - 1, whole, whole + 1, 10_000})
    for count in counts:
        read.clear()
        found = last_lines(read_at, log.stat().st_size, count, BUDGET)
        if count <= whole:
            assert found.lines == lines[-count:], count  # exactly the last N
        else:  # as many as fit, whole (all of them where the log holds fewer)
            assert found.lines == lines[-whole:], count
            assert found.earlier == (size > KB), count
        assert sum(read) <= 2 * BUDGET + BLOCK_BYTES  # the end only, at 1 KB or 1 GB
    assert log.stat().st_size >= size
