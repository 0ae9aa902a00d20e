"""Many agents on one HTTP server: identical reads share one answer.

Tool work runs in threads of one process, and a read such as list_training_jobs is
mostly Python (files, JSON, pydantic) holding the GIL: 16 agents listing at once did 16
times the work in contention (p50 1.5 s against 41 ms alone). A read that changes
nothing (read-only, idempotent, not long, writing no file) is computed once for all the
callers asking the same thing at the same time, and its answer is served for a short
while after (TTL_S). While the next answer is computed, callers that come meanwhile get
the one before it, if it expired within TTL_S, rather than wait (one caller waits for the
computation, not every agent): a list is at most 2 x TTL_S and one computation stale,
which an agent polling it cannot tell from the poll's own timing; any other call through
the server clears what is kept, so an agent that deploys and then lists sees its job.
Failures are shared with the callers waiting, never kept."""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

TTL_S = 2.0
MAX_ENTRIES = 256


@dataclass
class _Entry:
    done: anyio.Event = field(default_factory=anyio.Event)
    value: Any = None
    error: BaseException | None = None
    has_value: bool = False
    expires: float = float("inf")
    # The answer this one replaces, served while this one is computed (see _compute).
    previous: _Entry | None = None


def key_of(tool: str, arguments: dict[str, Any], scope: str | None) -> str:
    """One key per tool, validated arguments and workspace."""
    return json.dumps([tool, scope, arguments], sort_keys=True, default=str)


class SharedReads:
    def __init__(self, ttl_s: float = TTL_S, max_entries: int = MAX_ENTRIES) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self.computed = 0  # how many answers were computed (the rest were shared)

    def clear(self) -> None:
        """Forget every answer, kept or in flight: a later caller computes anew (callers
        already waiting on one in flight still get it)."""
        self._entries.clear()

    async def get(self, key: str, compute: Callable[[], Awaitable[Any]]) -> Any:
        while True:
            entry = self._entries.get(key)
            if entry is None or entry.expires <= time.monotonic():
                return await self._compute(key, compute)
            if not entry.done.is_set() and entry.previous is not None:
                return entry.previous.value  # being recomputed: the last answer, no wait
            await entry.done.wait()
            if entry.error is not None:
                raise entry.error
            if entry.has_value:
                return entry.value
            # The computing call was cancelled: ask again (this caller may compute).

    async def _compute(self, key: str, compute: Callable[[], Awaitable[Any]]) -> Any:
        expired = self._entries.get(key)
        entry = self._entries[key] = _Entry()
        if (
            expired is not None
            and expired.has_value
            and time.monotonic() - expired.expires < self.ttl_s  # at most 2 x TTL old
        ):
            entry.previous = _Entry(value=expired.value, has_value=True)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        self.computed += 1
        try:
            entry.value = await compute()
            entry.has_value = True
            entry.expires = time.monotonic() + self.ttl_s
            return entry.value
        except BaseException as exc:
            if not isinstance(exc, anyio.get_cancelled_exc_class()):
                entry.error = exc
            if self._entries.get(key) is entry:
                del self._entries[key]
            raise
        finally:
            entry.done.set()
