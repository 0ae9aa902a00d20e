"""Progress reporting, injected into long work: the CLI draws a bar, MCP sends
notifications/progress, tests collect the calls."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol


class Progress(Protocol):
    def report(self, completed: float, total: float | None = None, message: str = "") -> None:
        """Report that `completed` of `total` units are done; `message` says what is happening."""


class NullProgress:
    def report(self, completed: float, total: float | None = None, message: str = "") -> None:
        pass


@dataclass(frozen=True)
class ProgressEvent:
    completed: float
    total: float | None
    message: str


@dataclass
class CollectingProgress:
    """Keeps every report; thread-safe because tools report from worker threads."""

    events: list[ProgressEvent] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def report(self, completed: float, total: float | None = None, message: str = "") -> None:
        with self._lock:
            self.events.append(ProgressEvent(completed, total, message))
