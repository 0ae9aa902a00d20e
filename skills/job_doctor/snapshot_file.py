"""Snapshot files: what `diagnose_training_job --save_snapshot` writes and `--snapshot`
reads back offline (JSON: job, pods, events, logs; secrets masked before writing)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from skills.job_doctor.diagnose import validate_snapshot
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.files import write_new_or_owned
from skills.shared.reading import ReadRefused, parse_json

# A snapshot file larger than this is not one this tool wrote (logs are tailed).
MAX_SNAPSHOT_BYTES = 512 * 2**20


def read_snapshot(path: Path) -> Any:
    """The file's JSON; a file that is not one is SNAPSHOT_INVALID, never a traceback (a
    FIFO or device is refused before it is read: it could block or never end)."""
    with open(path, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NONBLOCK)) as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise _invalid(path, "is not a regular file")
        if info.st_size > MAX_SNAPSHOT_BYTES:
            raise _invalid(path, f"is larger than {MAX_SNAPSHOT_BYTES // 2**20} MiB")
        raw = handle.read(MAX_SNAPSHOT_BYTES + 1)
    try:
        data = parse_json(raw.decode("utf-8"), what="snapshot file", source=path)
    except UnicodeDecodeError as exc:
        raise _invalid(path, f"is not JSON ({type(exc).__name__})") from None
    except ReadRefused as refused:  # malformed, or nested too deep for any walk over it
        raise _invalid(path, refused.problem) from None
    validate_snapshot(data, f"snapshot file {path}")
    return data


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
    path = write_new_or_owned(path, json.dumps(data, indent=1) + "\n", owns=_is_snapshot)
    return path.resolve()


def _is_snapshot(head: bytes) -> bool:
    """A file --save_snapshot wrote (so saving again may replace it); a job record or any
    other file is not replaced."""
    try:
        data = parse_json(head.decode("utf-8"))
        validate_snapshot(data, "existing file")
    except (UnicodeDecodeError, ToolFailure):
        return False
    return True
