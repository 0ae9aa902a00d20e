"""keyset_stream pages a list read as a stream exactly as keyset pages the list held
whole: the same page, the same count past it, the same last key, for every limit and
every cursor (a key, an entry's name, none); a bad cursor is refused either way."""

from __future__ import annotations

import random

import pytest

from skills.shared.errors import ToolFailure
from skills.shared.paging import after_name, cursor_after, keyset, keyset_stream

ITEMS = [(-float(t), f"job-{i}") for i, t in enumerate(random.Random(7).choices(range(9), k=40))]


def key(item: tuple[float, str]) -> tuple[float, str]:
    return item


def by_name(name: str) -> tuple[float, str] | None:
    return next((k for k in ITEMS if k[1] == name), None)


CURSORS = [None, cursor_after(sorted(ITEMS)[7]), after_name("job-3"), after_name("job-39")]


@pytest.mark.parametrize("limit", [None, 0, 1, 5, 39, 40, 100])
@pytest.mark.parametrize("cursor", CURSORS)
def test_a_streamed_page_is_the_page_of_the_list_held_whole(limit, cursor):
    whole = keyset(ITEMS, key, limit, cursor)
    assert keyset_stream(iter(ITEMS), key, limit, cursor, by_name) == whole


@pytest.mark.parametrize(
    "cursor",
    [after_name("gone"), "not-a-cursor", cursor_after(("another", "shape"))],
)
def test_a_cursor_that_names_nothing_listed_is_refused_as_keyset_refuses_it(cursor):
    with pytest.raises(ToolFailure):
        keyset(ITEMS, key, 5, cursor)
    with pytest.raises(ToolFailure):
        keyset_stream(iter(ITEMS), key, 5, cursor, by_name)


def test_the_stream_is_read_once_and_only_the_page_is_kept():
    seen = []

    def stream():
        for item in ITEMS:
            seen.append(item)
            yield item

    page, more, last = keyset_stream(stream(), key, 3, None, by_name)
    assert seen == ITEMS and page == sorted(ITEMS)[:3] and more == 37 and last == page[-1]
