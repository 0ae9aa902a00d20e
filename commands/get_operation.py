"""get_operation: an operation's status, progress and result; optionally follow it."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from commands._cli import main_for
from skills.operations import operations
from skills.operations.operation_state import OperationId, OperationState
from skills.shared.progress import Progress
from skills.shared.tooling import WaitSeconds, tool


@tool(read_only=True, idempotent=True, long=True)
def get_operation(
    *,
    operation_id: OperationId,
    wait_seconds: WaitSeconds = 0,
    progress: Progress | None = None,
) -> OperationState:
    """A long operation's status, progress, recent messages, and its result or error
    once it ended.

    wait_seconds > 0 follows it (streaming progress) until it ends or the time passes.
    """
    return operations.typed_state(operations.wait(operation_id, wait_seconds, progress))


main = main_for(get_operation)


if __name__ == "__main__":
    main()
