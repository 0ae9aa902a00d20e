"""cancel_operation: stop a running operation (needs confirm=True)."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Annotated

from pydantic import Field

from commands._cli import main_for
from skills.operations import operations
from skills.operations.operation_state import OperationId, OperationState
from skills.shared.confirm import Confirm, require_confirm
from skills.shared.progress import Progress
from skills.shared.tooling import tool


@tool(read_only=False, destructive=True, idempotent=True)
def cancel_operation(
    *,
    operation_id: OperationId,
    confirm: Annotated[
        Confirm, Field(description="Must be true: the work stops part-way.")
    ] = False,
    progress: Progress | None = None,
) -> OperationState:
    """Stop a running operation: SIGTERM to its worker, SIGKILL after 15 s.

    Destructive, so it needs confirm=true. An operation that already ended is
    reported as it is.
    """
    require_confirm(confirm, f"Cancelling {operation_id!r} stops its work part-way.")

    return operations.typed_state(operations.cancel(operation_id))


main = main_for(cancel_operation)


if __name__ == "__main__":
    main()
