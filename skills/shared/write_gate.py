"""A read-only server writes nothing. Its tool calls run closed to writes (a context
variable, set on the call's worker thread: an in-process caller beside it keeps its own),
and the writers of the suite's records consult it: a record that a read would repair or
complete (an ended job's outcome, a Slurm job's end, an operation whose worker died) is
computed and answered, not persisted, and any other record write is refused. A later
look from a server that may write keeps what this one only computed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from skills.shared.errors import ErrorCode, ToolFailure

_CLOSED: ContextVar[bool] = ContextVar("fsdp_eks_writes_closed", default=False)


@contextmanager
def closed_to_writes(closed: bool = True) -> Iterator[None]:
    """Inside, writes are closed when `closed` (else as they were opened: open)."""
    token = _CLOSED.set(closed)
    try:
        yield
    finally:
        _CLOSED.reset(token)


def writes_closed() -> bool:
    return _CLOSED.get()


def refuse_write(path: Path | str) -> None:
    """ToolFailure(permission_denied) when writes are closed here; else nothing."""
    if _CLOSED.get():
        raise ToolFailure(
            ErrorCode.PERMISSION_DENIED,
            f"This server is read-only: {path} was not written.",
            "Use a server started without --read-only for calls that change things.",
            {"path": str(path)},
        )
