"""Polling until a condition holds or a deadline passes: the one loop every wait uses."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll_until(
    poll: Callable[[], T],
    done: Callable[[T], bool],
    timeout_s: float | None,
    interval_s: float,
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call `poll` until `done(result)` holds or `timeout_s` has passed (None: no limit),
    sleeping `interval_s` between calls, never past the deadline. Returns the last result;
    the caller asks `done` of it to tell an end from a timeout. `poll` runs at least once
    and once more at the deadline, so a timeout reports the latest state. `clock` and
    `sleep` are injectable for tests."""
    deadline = None if timeout_s is None else clock() + timeout_s
    while True:
        result = poll()
        if done(result):
            return result
        if deadline is None:
            sleep(interval_s)
            continue
        remaining = deadline - clock()
        if remaining <= 0:
            return result
        sleep(min(interval_s, remaining))


__all__ = ["poll_until"]
