"""A small JSON record (a job's, an operation's) that several processes share: read
validated, changed only read-modify-write under an advisory file lock, written
atomically from a temp file of its own so a reader never sees half a record."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Generic, TypeVar

from filelock import FileLock, Timeout
from pydantic import BaseModel, ValidationError

from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.files import atomic_write_text

M = TypeVar("M", bound=BaseModel)


class RecordCorrupt(Exception):
    """The record exists but is not a valid record; `reason` says why, in one line."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class RecordFile(Generic[M]):
    def __init__(self, path: Path, model: type[M], lock_timeout_s: float = 30.0) -> None:
        self.path = path
        self.model = model
        self.lock_timeout_s = lock_timeout_s
        self._lock = FileLock(str(path.with_suffix(".lock")), timeout=lock_timeout_s)

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the record's lock (re-entrant in one process); ToolFailure(conflict) if
        another process holds it for longer than the timeout."""
        try:
            self._lock.acquire()
        except Timeout:
            raise ToolFailure(
                ErrorCode.CONFLICT,
                f"Another process has held the lock on {self.path} for "
                f"{self.lock_timeout_s:.0f} s.",
                "Try again in a moment; if it persists, look for a hung process using it.",
                {"lock": self._lock.lock_file},
            ) from None
        try:
            yield
        finally:
            self._lock.release()

    def read(self) -> M | None:
        """The record, or None when there is none. RecordCorrupt when it is unreadable."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise RecordCorrupt(self.path, "it is a directory, not a file") from None
        try:
            return self.model.model_validate_json(data)
        except ValidationError as exc:
            if not data.strip():
                reason = "it is empty"
            else:
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"]) or "the record"
                reason = f"{where}: {first['msg']}"
            raise RecordCorrupt(self.path, reason) from None

    def write(self, record: M) -> None:
        """Atomically replace the record. On a full disk, where no temp file can be
        made, the record is overwritten in place (its blocks are already allocated), so
        how a job ended still gets recorded."""
        text = record.model_dump_json(indent=1)
        try:
            atomic_write_text(self.path, text)
        except OSError as exc:
            if exc.errno != errno.ENOSPC or not self.path.is_file():
                raise
            self._overwrite_in_place(text)

    def _overwrite_in_place(self, text: str) -> None:
        data = text.encode()
        with open(self.path, "r+b") as out:
            old_size = os.fstat(out.fileno()).st_size
            # JSON allows trailing whitespace: pad over what the old record left.
            out.write(data + b" " * max(0, old_size - len(data)))

    def update(self, change: Callable[[M | None], M | None]) -> M | None:
        """Read, change, write, all under the lock. `change` gets the current record
        (None: none yet) and returns the new one, or None to leave it as it is."""
        with self.lock():
            current = self.read()
            new = change(current)
            if new is not None:
                self.write(new)
                return new
            return current
