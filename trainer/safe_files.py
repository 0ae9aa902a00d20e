"""How the trainer opens the files it reads (datasets) and the caches it writes.

The tools have their own bounded, no-link reader and writer (skills/shared); the
trainer runs in the job's image without them, so it has this small copy of the rules:

- read only regular files: a FIFO or a device (`data.txt -> /dev/zero`) is refused at
  open (O_NONBLOCK: a FIFO never blocks the open), so no read can hang or fill memory;
  a regular file is read up to its size when opened;
- a cache file is never opened through a link (O_NOFOLLOW), created only new
  (O_EXCL) under a name of its own, and renamed into place whole;
- one builder per cache at a time: an exclusive lock (flock) on a lock file beside it.
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from trainer.config import ConfigError


class NotRegularFile(ConfigError):
    """A path the trainer reads is not a regular file (a FIFO, a device, a directory)."""


def open_regular(path: Path, what: str, *, follow_links: bool = True) -> BinaryIO:
    """`path` open for reading, if it is a regular file (a link to one is followed
    unless `follow_links` is false). NotRegularFile otherwise; FileNotFoundError and
    other OSErrors as the system gives them."""
    flags = os.O_RDONLY | os.O_NONBLOCK | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not follow_links and os.path.islink(path):
            raise NotRegularFile(f"{what} {path} is a symbolic link; it is not followed") from exc
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = (
            "a FIFO"
            if stat.S_ISFIFO(mode)
            else "a directory"
            if stat.S_ISDIR(mode)
            else ("a device")
        )
        raise NotRegularFile(
            f"{what} {path} is {kind}, not a regular file; give a .txt or .jsonl file"
        )
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_regular(path: Path, what: str) -> bytes:
    """The bytes of the regular file at `path`, up to its size when opened (a file that
    grows meanwhile is not read for ever)."""
    with open_regular(path, what) as handle:
        return handle.read(os.fstat(handle.fileno()).st_size)


def create_new(path: Path) -> BinaryIO:
    """A new file at `path` for writing: never an existing file, never through a link."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    return os.fdopen(fd, "wb")


def write_atomic(path: Path, data: bytes, temp_name: str) -> None:
    """`path` replaced whole by `data`: written to `temp_name` beside it, then renamed."""
    tmp = path.with_name(temp_name)
    tmp.unlink(missing_ok=True)
    try:
        with create_new(tmp) as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def exclusive_lock(path: Path) -> Iterator[None]:
    """Hold an exclusive flock on the lock file `path` (made if missing, never through a
    link), waiting while another process holds it; released when the process dies."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(f"lock file {path} is not a regular file")
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


__all__ = [
    "NotRegularFile",
    "create_new",
    "exclusive_lock",
    "open_regular",
    "read_regular",
    "write_atomic",
]
