"""One shape for every list a tool returns (issue 35): the call takes `limit` and a
`cursor` (what the previous page's `next_cursor` said: how many entries came before),
and the result says how many `more` there are past its page and the `next_cursor` that
fetches them. The server's result cap (mcp_server/result_cap.py) continues a cut list
with the same cursor."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, TypeVar

from pydantic import Field

from skills.shared.results import ToolResult

T = TypeVar("T")

Cursor = Annotated[str | None, Field(pattern=r"^[0-9]{1,9}$", description="A list's next_cursor.")]


def offset_of(cursor: str | None) -> int:
    return int(cursor or 0)


class Paged(ToolResult):
    """A page of a list: what is past it."""

    more: int | None = Field(
        default=0, description="Entries past this page (None: more, not counted)."
    )
    next_cursor: str | None = Field(default=None, description="Pass as cursor for the rest.")

    @classmethod
    def page(cls, offset: int, shown: int, total: int | None, **fields: Any) -> Any:
        """The result for `shown` entries from `offset`, of `total` (None: not counted,
        more exist)."""
        more = None if total is None else max(0, total - offset - shown)
        cursor = str(offset + shown) if more is None or more else None
        return cls(more=more, next_cursor=cursor, **fields)

    def page_rows(self) -> list[tuple[str, Any]]:
        """The summary's last row: how to fetch what is past this page."""
        if self.next_cursor is None:
            return []
        return [
            ("more" if self.more is None else f"{self.more} more", f"cursor={self.next_cursor}")
        ]


def window(items: Sequence[T], limit: int, cursor: str | None) -> tuple[list[T], int, int]:
    """A list held whole, paged: (the page, its offset, the total)."""
    offset = offset_of(cursor)
    return list(items[offset : offset + limit]), offset, len(items)
