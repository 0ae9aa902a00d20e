"""Writing a file whole or not at all: the one atomic write every module uses."""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from skills.shared.errors import ErrorCode, ToolFailure


class SymlinkDestination(ToolFailure):
    """The destination is a symbolic link. Refused (O_NOFOLLOW semantics): renaming over
    it would silently drop the link, and writing through it would land somewhere the
    caller did not name."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            ErrorCode.PATH_NOT_ALLOWED,
            f"{path} is a symbolic link; it is not written through or replaced.",
            "Give the real file's path, or remove the link first.",
            {"path": str(path)},
        )
        self.path = path


def atomic_write_bytes(path: Path | str, data: bytes, mode: int | None = None) -> Path:
    """Replace `path` with `data`: a temporary file in the same directory (so the rename
    stays on one filesystem), flushed to disk, then renamed over the destination, so a
    reader sees the old content or the new, never a part. `mode` None keeps mkstemp's
    0o600. Raises SymlinkDestination for a link at `path`; OSError as the disk gives it
    (the temporary file is removed)."""
    path = Path(path)
    if _is_symlink(path):
        raise SymlinkDestination(path)
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _sync_directory(path.parent)
    return path


def atomic_write_text(
    path: Path | str, text: str, mode: int | None = None, encoding: str = "utf-8"
) -> Path:
    """atomic_write_bytes for text."""
    return atomic_write_bytes(path, text.encode(encoding), mode)


def write_new_or_owned(
    path: Path | str,
    text: str,
    *,
    owns: Callable[[bytes], bool] | None = None,
    overwrite: bool = False,
    mode: int | None = None,
) -> Path:
    """The one writer for a file a tool writes where its caller says (a fixed
    Dockerfile, an eksctl config, a snapshot, a kubeconfig): its directory made, then
    atomic_write_text (never through a link). An existing file is replaced only when
    `owns(its first bytes)` says the tool wrote it, or the caller asked (`overwrite`);
    otherwise ToolFailure(CONFLICT) and the file is left as it is."""
    path = Path(path).expanduser()
    if _is_symlink(path):
        raise SymlinkDestination(path)
    if path.exists() and not overwrite and not (owns and owns(_head(path))):
        raise ToolFailure(
            ErrorCode.CONFLICT,
            f"{path} exists and is not a file this tool wrote; it was left as it is.",
            "Name another file, or remove it first (overwrite=true where the tool has it).",
            {"path": str(path)},
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, text, mode)


def open_for_append(path: Path | str, *, truncate: bool = False) -> BinaryIO:
    """The one way a tool opens a file it writes as it goes (a server's or a job's log):
    created if missing, never through a symbolic link (O_NOFOLLOW: a link put in its place
    is refused, its target untouched), never a device or FIFO (O_NONBLOCK, then fstat),
    and only then truncated when `truncate`. SymlinkDestination for a link, ToolFailure
    (PATH_NOT_ALLOWED) for anything that is not a regular file; OSError as the disk gives it."""
    path = Path(path)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK
    try:
        fd = os.open(path, flags | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError:
        if _is_symlink(path):
            raise SymlinkDestination(path) from None
        if os.path.exists(path) and not os.path.isfile(path):
            raise _not_regular(path) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _not_regular(path)
    os.set_blocking(fd, True)
    if truncate:
        os.ftruncate(fd, 0)
    return os.fdopen(fd, "ab", buffering=0)


def own_directory(path: Path | str) -> Path:
    """`path` as a directory the tool keeps its files in (a server's folder): made if
    missing, refused when a symbolic link or anything but a directory stands there, so
    what the tool writes inside lands where it says, never behind a link."""
    path = Path(path)
    try:
        path.mkdir(parents=True)
    except FileExistsError:  # a directory already, or whatever stands there: judged below
        pass
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise SymlinkDestination(path)
    if not stat.S_ISDIR(info.st_mode):
        raise _not_regular(path, "is not a directory")
    return path


def _not_regular(path: Path, problem: str = "is not a regular file") -> ToolFailure:
    return ToolFailure(
        ErrorCode.PATH_NOT_ALLOWED,
        f"{path} {problem}; the tool does not write there.",
        "Remove what stands at that path (a device, pipe, directory or link); the tool "
        "makes its own file there.",
        {"path": str(path)},
    )


def _head(path: Path, limit: int = 16 << 20) -> bytes:
    """The first bytes of a regular file (b"" for anything else: not ours to judge)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return b""
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return b""
        return handle.read(limit)


def _is_symlink(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False


def _sync_directory(directory: Path) -> None:
    """Make the rename itself durable; best effort (some filesystems refuse a directory
    fsync, and the content is already safe)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


__all__ = [
    "SymlinkDestination",
    "atomic_write_bytes",
    "atomic_write_text",
    "open_for_append",
    "own_directory",
    "write_new_or_owned",
]
