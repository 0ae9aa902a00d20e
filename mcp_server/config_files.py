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


def refuse_symlink(path: Path) -> None:
    if path.is_symlink():
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"{path} is a symbolic link; the installer does not write through links.",
            "Edit the file it points at by hand, or replace the link with a file.",
        )


def read_json_object(path: Path) -> dict[str, Any] | None:
    """The file's object, or None when there is no file."""
    refuse_symlink(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}); left as it is.",
            "Fix the file (or move it away) and run the installer again.",
        ) from None
    if not isinstance(data, dict):
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"{path} holds a JSON {type(data).__name__}, not an object; left as it is.",
            "Fix the file (or move it away) and run the installer again.",
        )
    return data


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
