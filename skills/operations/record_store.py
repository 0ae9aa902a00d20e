"""A small JSON record (a job's, an operation's, a model server's) that several processes
share: read validated through the bounded reader (never through a link, never a device
or FIFO, never unbounded or nested deep enough to crash a parser), changed only
read-modify-write under an advisory file lock, written atomically from a temp file of
its own so a reader never sees half a record."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cached_property
from pathlib import Path
from typing import Generic, TypeVar

from filelock import FileLock, Timeout
from pydantic import BaseModel, ValidationError

from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.files import SymlinkDestination, atomic_write_text
from skills.shared.reading import DEFAULT_MAX_BYTES, ReadRefused, check_nesting, read_bytes
from skills.shared.write_gate import refuse_write, writes_closed

M = TypeVar("M", bound=BaseModel)

# A record is a few KB (an operation's result with its log tail a few hundred); far
# more is not a record this suite wrote.
MAX_RECORD_BYTES = DEFAULT_MAX_BYTES


class RecordCorrupt(Exception):
    """The record exists but is not a valid record; `reason` says why, in one line."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class RecordFile(Generic[M]):
    def __init__(
        self,
        path: Path,
        model: type[M],
        lock_timeout_s: float = 30.0,
        on_write: Callable[[M], None] | None = None,
    ) -> None:
        self.path = path
        self.model = model
        self.lock_timeout_s = lock_timeout_s
        # Told each record written, the lock still held (an index of records notes it).
        self.on_write = on_write

    @cached_property
    def _lock(self) -> FileLock:
        # Made when first taken: a list that only reads or looks at many jobs pays for none.
        return FileLock(str(self.path.with_suffix(".lock")), timeout=self.lock_timeout_s)

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the record's lock (re-entrant in one process); ToolFailure(conflict) if
        another process holds it for longer than the timeout. A link in the lock file's
        place is refused: taking the lock opens it for writing (and makes it: refused on
        a server closed to writes, write_gate)."""
        refuse_write(self._lock.lock_file)
        if Path(self._lock.lock_file).is_symlink():
            raise SymlinkDestination(Path(self._lock.lock_file))
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
            data = read_bytes(
                self.path, what="record", max_bytes=MAX_RECORD_BYTES, follow_links=False
            )
            check_nesting(data.decode("utf-8", errors="replace"), "record", self.path, 64)
        except ReadRefused as refused:
            if refused.code == "not_found":
                return None
            if self.path.is_dir() and not self.path.is_symlink():
                raise RecordCorrupt(self.path, "it is a directory, not a file") from None
            raise RecordCorrupt(self.path, f"it {refused.problem}") from None
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
        how a job ended still gets recorded. Refused on a server closed to writes."""
        refuse_write(self.path)
        text = record.model_dump_json(indent=1)
        try:
            atomic_write_text(self.path, text)
        except OSError as exc:
            if exc.errno != errno.ENOSPC or self.path.is_symlink() or not self.path.is_file():
                raise
            self._overwrite_in_place(text)
        if self.on_write is not None:
            self.on_write(record)

    def _overwrite_in_place(self, text: str) -> None:
        data = text.encode()
        with open(self.path, "r+b") as out:
            stat = os.fstat(out.fileno())
            old_size = stat.st_size
            # Only into blocks the file already has: a write that needs one more would
            # stop part way on the full disk and leave half a new record over the old.
            if len(data) > max(old_size, stat.st_blocks * 512):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
            # JSON allows trailing whitespace: pad over what the old record left.
            out.write(data + b" " * max(0, old_size - len(data)))

    def update(self, change: Callable[[M | None], M | None]) -> M | None:
        """Read, change, write, all under the lock. `change` gets the current record
        (None: none yet) and returns the new one, or None to leave it as it is. On a
        server closed to writes (write_gate) the change is computed and returned, neither
        locked nor written: a read that completes a record still answers in full."""
        if writes_closed():
            current = self.read()
            new = change(current)
            return current if new is None else new
        with self.lock():
            current = self.read()
            new = change(current)
            if new is not None:
                self.write(new)
                return new
            return current
