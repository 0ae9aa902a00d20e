"""Progress reporting, injected into long work: the CLI draws a bar, MCP sends
notifications/progress, operations write their record, tests collect the calls.

It also carries cancellation the other way: a cancelled reporter makes the work's next
`report()` (or `raise_if_cancelled()`) raise `Cancelled`, so an MCP client's cancel or
`cancel_operation` reaches the loop doing the work."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Protocol

from skills.shared.errors import ErrorCode, ToolFailure


class Cancelled(ToolFailure):
    def __init__(self, what: str = "The call") -> None:
        super().__init__(
            ErrorCode.CANCELLED, f"{what} was cancelled.", "Call again to start it over."
        )


class Progress(Protocol):
    def report(self, completed: float, total: float | None = None, message: str = "") -> None:
        """Report that `completed` of `total` units are done; `message` says what is happening.
        Raises Cancelled once the caller has cancelled."""
        ...

    @property
    def cancelled(self) -> bool:
        """True once whoever asked for the work has cancelled it."""
        ...


def raise_if_cancelled(progress: Progress) -> None:
    """For loops that wait without reporting: stop here if the caller cancelled."""
    if progress.cancelled:
        raise Cancelled()


class CancellableProgress:
    """Base for reporters: `cancel()` (from any thread) makes the next report raise."""

    def __init__(self) -> None:
        self._cancel = threading.Event()

    def cancel(self) -> None:
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def report(self, completed: float, total: float | None = None, message: str = "") -> None:
        raise_if_cancelled(self)
        self.emit(completed, total, message)

    def emit(self, completed: float, total: float | None, message: str) -> None:
        """Deliver one report; subclasses override."""


class NullProgress(CancellableProgress):
    pass


@dataclass(frozen=True)
class ProgressEvent:
    completed: float
    total: float | None
    message: str


@dataclass
class CollectingProgress(CancellableProgress):
    """Keeps every report; thread-safe because tools report from worker threads."""

    events: list[ProgressEvent] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        super().__init__()

    def emit(self, completed: float, total: float | None, message: str) -> None:
        with self._lock:
            self.events.append(ProgressEvent(completed, total, message))
