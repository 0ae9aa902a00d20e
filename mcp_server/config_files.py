"""Reading and writing the clients' JSON config files without losing anything: a file
that is not a JSON object is refused, never overwritten; writes go to a temporary
file in the same folder and are renamed over the target (a reader sees the old file
or the new one, never half of one); a target that is a symbolic link is refused
rather than replaced (it points at someone's dotfiles) or written through."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.reading import ReadRefused, parse_json, read_bytes


def refuse_symlink(path: Path) -> None:
    if path.is_symlink():
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"{path} is a symbolic link; the installer does not write through links.",
            "Edit the file it points at by hand, or replace the link with a file.",
        )


# Claude Code's ~/.claude.json grows with its history; nothing real is this big or deep.
CONFIG_MAX_BYTES = 32 * 1024 * 1024
CONFIG_MAX_DEPTH = 200


def read_bytes_or_none(path: Path, what: str) -> bytes | None:
    """The regular file's bytes (bounded, never through a link, never blocking on a FIFO),
    or None when there is no file. Anything else is a ToolFailure, nothing written."""
    refuse_symlink(path)
    try:
        return read_bytes(path, what=what, max_bytes=CONFIG_MAX_BYTES, follow_links=False)
    except ReadRefused as refused:
        if refused.code == ErrorCode.NOT_FOUND:
            return None
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"{refused.message} Left as it is.",
            "Move it away (or make it a regular file) and run the installer again.",
            refused.details,
        ) from None


def read_json_object(path: Path) -> tuple[dict[str, Any] | None, bytes | None]:
    """(the file's object, its bytes), or (None, None) when there is no file."""
    data = read_bytes_or_none(path, "config file")
    if data is None:
        return None, None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"{path} is not UTF-8 text; left as it is.",
            "Fix the file's encoding (or move it away) and run the installer again.",
        ) from None
    try:
        parsed = parse_json(text, what="config file", source=path, max_depth=CONFIG_MAX_DEPTH)
    except ReadRefused as refused:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"{refused.message} Left as it is.",
            "Fix the file (or move it away) and run the installer again.",
        ) from None
    if not text.strip():
        parsed = {}
    if not isinstance(parsed, dict):
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"{path} holds a JSON {type(parsed).__name__}, not an object; left as it is.",
            "Fix the file (or move it away) and run the installer again.",
        )
    return parsed, data


def refuse_odd_path(base: Path | None, path: Path) -> None:
    """ToolFailure unless every folder from `base` down to `path` is a real folder (no
    link that may lead out of `base`, no file where a folder goes) and `path` itself, if
    it exists, is a regular file that is not a link. `base` None: folders may be links
    (a home's dotfiles often are), files still may not."""
    anchor = base if base is not None and path.is_relative_to(base) else Path(path.anchor)
    here = anchor
    for part in path.relative_to(anchor).parts[:-1]:
        here = here / part
        if base is not None and here.is_symlink():
            raise ToolFailure(
                ErrorCode.INVALID_INPUT,
                f"{here} is a symbolic link; the installer does not write through links.",
                "Replace the link with a folder, or install by hand.",
                {"path": str(here)},
            )
        if here.exists() and not here.is_dir():
            raise ToolFailure(
                ErrorCode.INVALID_INPUT,
                f"{here} is a file where a folder goes; left as it is.",
                "Move it away and run the installer again.",
                {"path": str(here)},
            )
    refuse_symlink(path)
    if path.exists() and not path.is_file():
        kind = "a folder" if path.is_dir() else "not a regular file"
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"{path} is {kind}; left as it is.",
            "Move it away and run the installer again.",
            {"path": str(path)},
        )


def json_text(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def _new_file_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` by temp file + rename in the same folder (an existing
    file's mode kept, a new one's from the umask)."""
    refuse_symlink(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777 if path.exists() else _new_file_mode()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)  # mkstemp made it 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
