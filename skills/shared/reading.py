"""Reading a file a caller named, bounded: the one reader every tool uses for input files
(NCCL output, Dockerfiles, requirement files, snapshots, logs, kubeconfigs).

Every read is capped (a device such as /dev/zero or a sparse multi-GB file is refused
before it fills memory), refuses what is not a regular file, can refuse a symbolic link
(a log the tool itself wrote), can require the file to lie under a root (a requirements
file referenced from a Dockerfile stays in the build context), and JSON/YAML documents
are depth-limited. Every refusal is a ToolFailure, never an untyped exception."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, BinaryIO

from skills.shared.errors import ErrorCode, ToolFailure

# Big enough for any real input file a tool reads whole (a Dockerfile, a kubeconfig,
# a saved snapshot with logs, an all_reduce_perf output); callers pass less where it fits.
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
# Deeper than any real kubeconfig or snapshot; shallow enough that no recursive walk
# over the document can reach Python's recursion limit.
DEFAULT_MAX_DEPTH = 64


class ReadRefused(ToolFailure):
    """A file that the bounded reader will not read (too big, not a regular file, a link,
    outside its root, not UTF-8, not JSON/YAML or nested too deep)."""

    def __init__(
        self,
        what: str,
        path: Path | str,
        problem: str,
        hint: str,
        code: ErrorCode = ErrorCode.INVALID_INPUT,
    ) -> None:
        super().__init__(
            code, f"{what} {path} {problem}.", hint, {"path": str(path), "problem": problem}
        )
        self.problem = problem


def _open_regular(
    path: Path, what: str, follow_links: bool, link_hint: str
) -> tuple[BinaryIO, os.stat_result]:
    """The open regular file at `path` and its stat: never blocking on a FIFO, never
    through a link at `path` unless `follow_links`; FileNotFoundError passes through
    for the caller to judge, anything else is ReadRefused."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if not follow_links and _is_link(path):
            raise ReadRefused(
                what, path, "is a symbolic link", link_hint, ErrorCode.PATH_NOT_ALLOWED
            ) from None
        raise ReadRefused(
            what,
            path,
            f"cannot be read ({type(exc).__name__})",
            f"Give the path of a readable {what}.",
        ) from None
    info = os.fstat(fd)  # before fdopen, which raises IsADirectoryError on a directory
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise ReadRefused(
            what,
            path,
            "is not a regular file",
            f"Give the path of a regular {what} (not a device, pipe or directory).",
        )
    os.set_blocking(fd, True)  # a regular file: O_NONBLOCK only kept a FIFO from hanging
    return os.fdopen(fd, "rb"), info


def read_bytes(
    path: Path | str,
    *,
    what: str = "file",
    max_bytes: int = DEFAULT_MAX_BYTES,
    follow_links: bool = True,
    within: Path | None = None,
) -> bytes:
    """The bytes of the regular file at `path`, at most `max_bytes`. `follow_links`
    False refuses a symbolic link at `path` itself (O_NOFOLLOW); `within` refuses a path
    that resolves (links followed) outside that directory. Raises ReadRefused."""
    path = Path(path).expanduser()
    if within is not None and not _inside(path, within):
        raise ReadRefused(
            what,
            path,
            f"lies outside {within}",
            f"Keep {what} inside {within}.",
            ErrorCode.PATH_NOT_ALLOWED,
        )
    try:
        handle, info = _open_regular(path, what, follow_links, "Links are not followed here.")
    except FileNotFoundError:
        raise ReadRefused(
            what,
            path,
            "does not exist",
            f"Give the path of an existing {what}.",
            ErrorCode.NOT_FOUND,
        ) from None
    with handle:
        if info.st_size > max_bytes:
            raise _too_big(what, path, max_bytes)
        # A buffer of the file's size, not of max_bytes (16 MiB a record read, else);
        # the size may grow between fstat and read: the rest then, up to the limit.
        data = handle.read(info.st_size + 1)
        if len(data) > info.st_size:
            data += handle.read(max_bytes + 1 - len(data))
    if len(data) > max_bytes:
        raise _too_big(what, path, max_bytes)
    return data


def read_chunk(
    path: Path | str,
    offset: int,
    *,
    what: str = "log",
    max_bytes: int = DEFAULT_MAX_BYTES,
    follow_links: bool = False,
) -> bytes:
    """Up to `max_bytes` of a growing file from `offset` (negative: that many bytes
    before its end), b"" while it does not exist. For logs a tool reads as they grow:
    never through a symbolic link unless asked, never from a device or FIFO."""
    path = Path(path)
    try:
        handle, info = _open_regular(
            path, what, follow_links, "The tool only reads the log it wrote; remove the link."
        )
    except FileNotFoundError:
        return b""
    with handle:
        handle.seek(max(0, info.st_size + offset) if offset < 0 else offset)
        return handle.read(max_bytes)


def read_text(path: Path | str, *, errors: str = "strict", **limits: Any) -> str:
    """read_bytes decoded as UTF-8; with errors="strict" undecodable bytes are ReadRefused."""
    what = limits.get("what", "file")
    data = read_bytes(path, **limits)
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError:
        raise ReadRefused(
            what, path, "is not UTF-8 text", f"Give a UTF-8 encoded {what}."
        ) from None


def load_json(path: Path | str, *, max_depth: int = DEFAULT_MAX_DEPTH, **limits: Any) -> Any:
    """The JSON document in `path`, refused when malformed or nested over `max_depth`."""
    what = limits.get("what", "file")
    return parse_json(read_text(path, **limits), what=what, source=path, max_depth=max_depth)


def parse_json(
    text: str,
    *,
    what: str = "document",
    source: Path | str = "",
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> Any:
    """json.loads with a nesting limit checked before parsing (the parser itself recurses)."""
    check_nesting(text, what, source, max_depth)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ReadRefused(
            what, source, f"is not valid JSON ({str(exc)[:120]})", f"Give a {what} in JSON."
        ) from None


def load_yaml(path: Path | str, *, max_depth: int = DEFAULT_MAX_DEPTH, **limits: Any) -> Any:
    """The YAML document in `path` (safe loader), refused when malformed or too deep."""
    import yaml

    what = limits.get("what", "file")
    text = read_text(path, **limits)
    check_nesting(text, what, path, max_depth)
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as exc:
        raise ReadRefused(
            what, path, f"is not valid YAML ({type(exc).__name__})", f"Give a {what} in YAML."
        ) from None
    if depth_of(data, max_depth) > max_depth:
        raise _too_deep(what, path, max_depth)
    return data


def depth_of(value: Any, limit: int) -> int:
    """The nesting depth of a parsed document, walked without recursion; stops counting
    past `limit` (a YAML alias can make a shallow text a deep or cyclic value)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return depth
        deepest = max(deepest, depth)
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
    return deepest


def check_nesting(text: str, what: str, source: Path | str, max_depth: int) -> None:
    """ReadRefused when `text` nests brackets deeper than `max_depth` (for a caller that
    parses the text itself, e.g. pydantic's model_validate_json)."""
    # Fewer opening brackets than the limit, wherever they are, cannot nest past it:
    # counted in C, this answers most texts (a tool call's frame) without the loop below.
    if text.count("[") + text.count("{") <= max_depth:
        return
    # Brackets outside strings counted in one pass: linear, and catches a deep document
    # before a recursive parser sees it. For YAML flow style it is a safe over-count.
    depth, in_string, escaped = 0, False, False
    for char in text:
        if in_string:
            escaped = (char == "\\") and not escaped
            if char == '"' and not escaped:
                in_string = False
            continue
        if char == '"':
            in_string, escaped = True, False
        elif char in "[{":
            depth += 1
            if depth > max_depth:
                raise _too_deep(what, source, max_depth)
        elif char in "]}":
            depth -= 1


def _inside(path: Path, root: Path) -> bool:
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):
        return False


def _is_link(path: Path) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        return False


def _too_big(what: str, path: Path | str, max_bytes: int) -> ReadRefused:
    return ReadRefused(
        what,
        path,
        f"is larger than {max_bytes} bytes",
        f"Give a {what} under {max_bytes // 1024} KiB.",
    )


def _too_deep(what: str, path: Path | str, max_depth: int) -> ReadRefused:
    return ReadRefused(
        what,
        path,
        f"is nested deeper than {max_depth} levels",
        f"Give a {what} nested at most {max_depth} levels.",
    )


__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_DEPTH",
    "ReadRefused",
    "check_nesting",
    "depth_of",
    "load_json",
    "load_yaml",
    "parse_json",
    "read_bytes",
    "read_chunk",
    "read_text",
]
