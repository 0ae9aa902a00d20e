"""One shape for every list a tool returns (issue 35): the call takes `limit` and a
`cursor` (what the previous page's `next_cursor` said), and the result says how many
`more` there are past its page and the `next_cursor` that fetches them. The server's
result cap (mcp_server/result_cap.py) continues a cut list from its last entry shown.

A cursor is a keyset, not an offset (issue 45): every list is in the order of a key that
an update leaves alone (a job's submission time, an operation's creation, a server's
name; the entry's name breaks ties), and the cursor is the key of the last entry shown,
opaque to the caller. The next page is the entries after that key, so a job updated,
added or removed between two pages neither shows twice nor pushes another out of view.
The result cap names the entry instead (`after_name`): the list finds its key."""

from __future__ import annotations

import base64
import binascii
import json
from bisect import insort
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Generic, TypeVar

from pydantic import Field

from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.results import ToolResult

T = TypeVar("T")

# A list's order: ascending (a newest-first list keys on the negated time); the entry's
# name is the key's last part.
Key = tuple[float | int | str, ...]

Cursor = Annotated[
    str | None, Field(pattern=r"^[A-Za-z0-9_-]{4,600}$", description="A list's next_cursor.")
]


def cursor_after(key: Key) -> str:
    """The cursor of the entries after `key`."""
    return _encode({"k": list(key)})


def after_name(name: str) -> str:
    """The cursor of the entries after the one named `name` (its key looked up then)."""
    return _encode({"n": name})


def _encode(data: dict[str, Any]) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _bad(cursor: str, why: str) -> ToolFailure:
    return ToolFailure(
        ErrorCode.INVALID_INPUT,
        f"cursor {cursor[:40]!r} is not a next_cursor of this list ({why}).",
        "Pass the next_cursor a page of the same list returned, or no cursor to start over.",
        {"field": "cursor"},
    )


def decode(cursor: str | None) -> Key | str | None:
    """The key a cursor continues after, the name of the entry (the result cap's), or
    None for the start; a cursor that is neither is invalid input."""
    if cursor is None:
        return None
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError):
        raise _bad(cursor, "not one this tool made") from None
    if not isinstance(data, dict) or len(data) != 1:
        raise _bad(cursor, "not one this tool made")
    if isinstance(name := data.get("n"), str):
        return name
    key = data.get("k")
    if not isinstance(key, list) or not key or not isinstance(key[-1], str):
        raise _bad(cursor, "not one this tool made")
    parts: list[float | int | str] = [p for p in key if isinstance(p, (int, float, str))]
    if len(parts) != len(key):
        raise _bad(cursor, "not one this tool made")
    return tuple(parts)


def start_after(
    cursor: str | None, keys: Callable[[str], Key | None], like: Key | None = None
) -> Key | None:
    """The key to list after: the cursor's own, or (a cursor naming an entry) that
    entry's key as `keys` finds it now. `like`, a key of this list: a cursor's key of
    another shape (another list's) is refused."""
    anchor = decode(cursor)
    if isinstance(anchor, str):
        key = keys(anchor)
        if key is None:
            raise _bad(cursor or "", f"{anchor!r} is no longer listed: list again from the start")
        return key
    if (
        anchor is not None
        and like is not None
        and [_kind(p) for p in anchor] != [_kind(p) for p in like]
    ):
        raise _bad(cursor or "", "another list's")
    return anchor


def _kind(part: float | int | str) -> type:
    return str if isinstance(part, str) else float


def is_after(key: Key, anchor: Key | None) -> bool:
    if anchor is None:
        return True
    try:
        return key > anchor
    except TypeError:  # another list's key shape
        raise _bad(cursor_after(anchor), "another list's") from None


@dataclass(frozen=True)
class Page(Generic[T]):
    """What a list returns: its page, how many are past it (None: more, not counted)
    and the key of the page's last entry (what its cursor continues after)."""

    items: list[T]
    more: int | None
    last: Key | None


def keyset(
    items: Sequence[T], key: Callable[[T], Key], limit: int | None, cursor: str | None
) -> tuple[list[T], int, Key | None]:
    """A list held whole, paged: (the page after the cursor, how many are past it, the
    key of its last entry)."""
    keyed = sorted(((key(item), item) for item in items), key=lambda pair: pair[0])
    like = keyed[0][0] if keyed else None
    anchor = start_after(cursor, lambda n: next((k for k, _ in keyed if k[-1] == n), None), like)
    rest = [(k, item) for k, item in keyed if is_after(k, anchor)]
    shown = rest if limit is None else rest[:limit]
    return [item for _, item in shown], len(rest) - len(shown), shown[-1][0] if shown else None


def keyset_stream(
    items: Iterable[T],
    key: Callable[[T], Key],
    limit: int | None,
    cursor: str | None,
    key_of_name: Callable[[str], Key | None],
) -> tuple[list[T], int, Key | None]:
    """`keyset` of a list read as a stream (a LIST in chunks): only the page so far is
    held, never the list, so a page's memory does not grow with what the list holds. A
    cursor naming an entry (the result cap's) finds its key through `key_of_name`."""
    started, anchor = False, None
    best: list[tuple[Key, T]] = []  # the page so far, in key order
    past = 0
    for item in items:
        k = key(item)
        if not started:
            started, anchor = True, start_after(cursor, key_of_name, k)
        if not is_after(k, anchor):
            continue
        if limit is not None and len(best) >= limit:
            past += 1
            if not best or k > best[-1][0]:
                continue
            best.pop()
        insort(best, (k, item), key=lambda pair: pair[0])
    if not started:
        start_after(cursor, key_of_name)  # a bad cursor is refused, even of an empty list
    return [item for _, item in best], past, best[-1][0] if best else None


class Paged(ToolResult):
    """A page of a list: what is past it."""

    entry_name: ClassVar[str] = "name"  # the field of an entry its key ends with

    more: int | None = Field(
        default=0, description="Entries past this page (None: more, not counted)."
    )
    next_cursor: str | None = Field(default=None, description="Pass as cursor for the rest.")

    @classmethod
    def page(cls, last: Key | None, more: int | None, **fields: Any) -> Any:
        """The result whose last entry has key `last` (None: no entry), with `more` past
        it (None: more exist, not counted)."""
        cursor = cursor_after(last) if last is not None and (more is None or more) else None
        return cls(more=more, next_cursor=cursor, **fields)

    def page_rows(self) -> list[tuple[str, Any]]:
        """The summary's last row: how to fetch what is past this page."""
        if self.next_cursor is None:
            return []
        return [
            ("more" if self.more is None else f"{self.more} more", f"cursor={self.next_cursor}")
        ]
