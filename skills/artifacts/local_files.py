"""The local side of a fetch: the files a source yields, checked and written under one
destination folder. Every relative path is checked before anything is written (no
absolute path, no '..', nothing that lands outside the folder through a link), files that
exist are replaced only with confirm, and each file is written whole (atomic_write_bytes)
or not at all."""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from skills.shared.confirm import require_confirm
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.files import atomic_write_bytes
from skills.shared.progress import Progress


@dataclass(frozen=True)
class Entry:
    """One file of a source: its path under the folder, its size, how to read it."""

    path: str
    size: int
    read: Callable[[], bytes]


def safe_relpath(path: str, source: str) -> str:
    """`path` as a relative POSIX path that stays under its folder, else refused."""
    normal = posixpath.normpath(path.replace("\\", "/")).lstrip("/") if path else ""
    if not normal or normal == "." or path.startswith("/") or normal.split("/")[0] == "..":
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"{source} holds an entry {path!r} that would land outside the destination.",
            "Fetch a folder whose entries are plain relative paths.",
            {"entry": path},
        )
    return normal


def check_target(dest: Path, relpath: str) -> Path:
    """Where `relpath` lands under `dest`; refused when the folder or any part of the
    path is a symbolic link (writing through it could land outside `dest`)."""
    here = dest
    for part in ("", *relpath.split("/")):
        here = here / part if part else here
        if here.is_symlink():
            raise ToolFailure(
                ErrorCode.PATH_NOT_ALLOWED,
                f"{here} is a symbolic link: nothing is written through it.",
                "Fetch into a folder without links, or remove the link first.",
                {"path": str(here)},
            )
    return dest / relpath


def existing(dest: Path, entries: Iterable[Entry]) -> list[str]:
    """The entries' paths that name a file already under `dest`."""
    if dest.exists() and not dest.is_dir():
        raise ToolFailure(
            ErrorCode.NOT_A_DIRECTORY,
            f"{dest} exists and is not a folder.",
            "Give a folder (new or existing) as dest.",
            {"dest": str(dest)},
        )
    return [e.path for e in entries if (dest / e.path).exists() or (dest / e.path).is_symlink()]


def write(dest: Path, entries: list[Entry], confirm: bool, progress: Progress | None) -> list[str]:
    """Write every entry under `dest`; the paths replaced (only with confirm)."""
    replaced = existing(dest, entries)
    if replaced:
        shown = ", ".join(replaced[:5]) + (
            f" and {len(replaced) - 5} more" if len(replaced) > 5 else ""
        )
        require_confirm(
            confirm,
            f"{len(replaced)} file(s) under {dest} would be overwritten: {shown}.",
            "to overwrite them",
            {"dest": str(dest), "overwritten": replaced[:50]},
        )
    targets = [check_target(dest, e.path) for e in entries]  # all, before any write
    dest.mkdir(parents=True, exist_ok=True)
    done = 0
    for entry, target in zip(entries, targets, strict=True):
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(target, entry.read())
        done += entry.size
        if progress is not None:
            progress.report(done, sum(e.size for e in entries) or None, entry.path)
    return replaced
