"""Snapshot files: what `diagnose_training_job --save_snapshot` writes and `--snapshot`
reads back offline (JSON: job, pods, events, nodes, logs; secrets masked before writing).

A file is read as a stream, never parsed whole: its objects (job, pods, events, nodes:
small beside the logs) first, passing over the logs, then its logs one at a time as the
doctor scans them; so memory follows the objects and the largest log, not the file (a
whole parse held about 2.5 times it). The file is JSON laid out one entry a line, the
logs last and one log a line (`snapshot_text`): each line is parsed by the standard
library's C parser. Any other JSON of the same shape (a file written before this layout,
or by hand) is read by a streaming parser (ijson) instead, slower but as bounded."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import IO, Any

import ijson

from skills.job_doctor.diagnose import Snapshot, validate_snapshot
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.files import write_new_or_owned
from skills.shared.reading import DEFAULT_MAX_DEPTH, parse_json

# A snapshot file larger than this is not one this tool wrote (logs are tailed).
MAX_SNAPSHOT_BYTES = 512 * 2**20
LOGS = "logs"


def read_snapshot(path: Path) -> tuple[Snapshot, Iterator[tuple[str, str]]]:
    """The file's snapshot without its logs, and its logs as (key, text), read from the
    file one at a time when iterated (once). A file that is not a snapshot is
    SNAPSHOT_INVALID, never a traceback (a FIFO or device is refused before it is read:
    it could block or never end); a log that is not text is found when it is reached."""
    with _open(path) as handle:
        objects = _line_objects(handle)
        lines = objects is not None
        if objects is None:
            handle.seek(0)
            objects = _objects(handle, path)
    for key, value in objects.items():
        if _depth(value) > DEFAULT_MAX_DEPTH:
            raise _invalid(path, f"has {key[:40]!r} nested deeper than {DEFAULT_MAX_DEPTH} levels")
    logs = _line_logs(path) if lines else _logs(path)
    return validate_snapshot(objects, f"snapshot file {path}"), logs


# The line layout's lines around its logs.
_START, _LOGS_START, _LOGS_NONE, _END = b"{\n", b'"logs": {\n', b'"logs": {}\n', b"}\n"


def _line_objects(handle: IO[bytes]) -> dict[str, Any] | None:
    """The objects of a file in the line layout (its log lines read past, not parsed),
    or None when the file is not laid out so."""
    if handle.readline(len(_START)) != _START:  # bounded: an old file may be one line
        return None
    found: dict[str, Any] = {}
    for line in handle:
        if line in (_LOGS_START, _LOGS_NONE):
            ended = line == _LOGS_NONE
            for log_line in handle if not ended else ():
                if log_line == _END:
                    ended = True
                    break
            return found if ended and handle.readline() == _END and not handle.read(1) else None
        entry = _entry(line)
        if entry is None:
            return None
        found.update(entry)
    return None


def _entry(line: bytes) -> dict[str, Any] | None:
    """A line `"key": value,` as {key: value}; None when it is not one."""
    if not line.endswith(b",\n"):
        return None
    try:
        entry = json.loads(b"{" + line[:-2] + b"}")
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    return entry if len(entry) == 1 else None


def _line_logs(path: Path) -> Iterator[tuple[str, str]]:
    """The logs of a file in the line layout, one a line, each parsed as it is reached."""
    with _open(path) as handle:
        for line in handle:
            if line == _LOGS_START:
                break
        for line in handle:
            if line == _END:
                return
            entry = _entry(line if line.endswith(b",\n") else line[:-1] + b",\n")
            if entry is None:
                raise _invalid(path, "has a log line that is not JSON")
            ((key, text),) = entry.items()
            if not isinstance(text, str):
                raise _invalid(path, f"has a log {key[:80]!r} that is not text")
            yield key, text


def _open(path: Path) -> IO[bytes]:
    handle = open(path, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NONBLOCK))  # noqa: SIM115
    info = os.fstat(handle.fileno())
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = "is not a regular file"
    elif info.st_size > MAX_SNAPSHOT_BYTES:
        problem = f"is larger than {MAX_SNAPSHOT_BYTES // 2**20} MiB"
    if problem:
        handle.close()
        raise _invalid(path, problem)
    return handle


def _objects(handle: IO[bytes], path: Path) -> dict[str, Any]:
    """Any JSON's top-level entries but the logs, from the streaming parser's events
    less the logs' (whose texts are passed over, only checked to be a map)."""
    with _parsing(path):
        # Small reads: the parser makes every event of a read at once, each with its
        # path as a string, so a read of 64 KB of "[[[[..." held ~10 GB before the
        # depth bound below could refuse it (4 KB: a few MB at most).
        events = ijson.parse(handle, use_float=True, buf_size=PARSE_BYTES)
        return dict(ijson.kvitems(_without_logs(events, path), ""))


Event = tuple[str, str, Any]
PARSE_BYTES = 4096
_STARTS = ("start_map", "start_array")
_ENDS = ("end_map", "end_array")
_TOO_DEEP = f"is nested deeper than {DEFAULT_MAX_DEPTH} levels"


def _without_logs(events: Iterator[Event], path: Path) -> Iterator[Event]:
    """The parser's events of a top-level object, less the logs' entry."""
    first = next(events, None)
    if first != ("", "start_map", None):
        # Which to say: nested past the bound (whatever its type), or not an object.
        depth = int(first is not None and first[1] in _STARTS)
        for _, event, _ in islice(events, DEFAULT_MAX_DEPTH) if depth else ():
            if event not in _STARTS:
                break
            depth += 1
        deep = depth > DEFAULT_MAX_DEPTH
        raise _invalid(path, _TOO_DEEP if deep else "is not a JSON object")
    yield "", "start_map", None
    depth = 1
    for prefix, event, value in events:
        # Refused as the parser reaches the bound, not after: its prefix for each level
        # holds the path down to it, so a 100,000-deep file held ~20 GB at its bottom.
        if event in _STARTS:
            depth += 1
            if depth > DEFAULT_MAX_DEPTH:
                raise _invalid(path, _TOO_DEEP)
        elif event in _ENDS:
            depth -= 1
        if prefix == "":
            if event == "map_key" and value == LOGS:
                continue
        elif prefix == LOGS:
            if event not in ("start_map", "end_map", "map_key"):
                raise _invalid(path, "has logs that are not a map of texts")
            continue
        elif prefix.startswith(LOGS + "."):
            continue
        yield prefix, event, value


def _depth(value: Any) -> int:
    """How deep containers nest in `value` (a loop, not recursion: it may be deep)."""
    deepest, pending = 0, [(value, 1)] if isinstance(value, (dict, list)) else []
    while pending:
        item, level = pending.pop()
        deepest = max(deepest, level)
        if level <= DEFAULT_MAX_DEPTH:
            children = item.values() if isinstance(item, dict) else item
            pending += [(c, level + 1) for c in children if isinstance(c, (dict, list))]
    return deepest


def _logs(path: Path) -> Iterator[tuple[str, str]]:
    """Any JSON's logs, one (key, text) at a time (the file read again, as a stream)."""
    with _open(path) as handle, _parsing(path):
        for key, text in ijson.kvitems(handle, LOGS):
            if not isinstance(text, str):
                raise _invalid(path, f"has a log {key[:80]!r} that is not text")
            yield key, text


class _parsing:
    """Malformed JSON or bytes that are not UTF-8, as SNAPSHOT_INVALID."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, trace: Any) -> None:
        if isinstance(exc, (ijson.JSONError, UnicodeDecodeError)):
            raise _invalid(self.path, f"is not JSON ({str(exc)[:120]})") from None


def _invalid(path: Path, problem: str) -> ToolFailure:
    return ToolFailure(
        ErrorCode.SNAPSHOT_INVALID,
        f"The snapshot file {path} {problem}.",
        "Give a file that --save_snapshot wrote (JSON: job, pods, events, logs).",
        {"path": str(path)},
    )


def write_snapshot(path: Path, data: dict[str, Any]) -> Path:
    """Written whole or not at all (a temporary file renamed over the target), never
    through a link, and over an existing file only when it is a snapshot."""
    path = write_new_or_owned(path, snapshot_text(data), owns=_is_snapshot)
    return path.resolve()


def snapshot_text(data: dict[str, Any]) -> str:
    """The snapshot as JSON laid out for `read_snapshot`: one entry a line, the logs
    last, one log a line (JSON strings hold no raw line break)."""
    lines = [f"{json.dumps(k)}: {json.dumps(v)},\n" for k, v in data.items() if k != LOGS]
    logs = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in (data.get(LOGS) or {}).items()]
    body = '"logs": {\n' + ",\n".join(logs) + "\n}\n" if logs else '"logs": {}\n'
    return "{\n" + "".join(lines) + body + "}\n"


def _is_snapshot(head: bytes) -> bool:
    """A file --save_snapshot wrote (so saving again may replace it); a job record or any
    other file is not replaced."""
    try:
        data = parse_json(head.decode("utf-8"))
        validate_snapshot(data, "existing file")
    except (UnicodeDecodeError, ToolFailure):
        return False
    return True
