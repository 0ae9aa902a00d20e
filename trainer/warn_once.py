"""A side channel's failures told once on stderr, then only counted.

Progress posts (progress_status.py) and experiment tracking (tracking.py) must never
stop or slow training, and a server that is down fails every request: the first
failure of each source says what failed and why, the later ones are counted."""

from __future__ import annotations

import sys
from typing import TextIO

# A failure's reason on stderr: one line this long at most.
REASON_LIMIT = 300


class FirstFailures:
    """Each source's failures counted; its first one told on stderr (or `log`)."""

    def __init__(self, log: TextIO | None = None) -> None:
        self.log = log
        self.counts: dict[str, int] = {}

    def failed(self, source: str, what: str, exc: BaseException) -> None:
        self.counts[source] = self.counts.get(source, 0) + 1
        if self.counts[source] == 1:
            reason = f"{type(exc).__name__}: {exc}"[:REASON_LIMIT]
            print(
                f"{source}: {what} failed ({reason}); training goes on, later failures "
                "are counted, not logged",
                file=self.log or sys.stderr,
                flush=True,
            )
