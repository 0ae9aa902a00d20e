"""list_operations: the operations recorded on this machine, newest first."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Annotated, Any

from pydantic import Field

from commands._cli import main_for
from skills.operations import operations
from skills.operations.operation_state import OperationState, OperationStatus
from skills.shared.paging import Cursor, Paged
from skills.shared.progress import Progress
from skills.shared.tooling import tool


class OperationList(Paged):
    entry_name = "operation_id"
    operations: list[OperationState]

    def left_out_over_mcp(self) -> dict[str, Any]:
        # A list says which operations and how they stand; get_operation gives one in full.
        return {"operations": {"__all__": {"result", "log_tail", "next_step", "error"}}}

    def summary_rows(self) -> list[tuple[str, Any]]:
        rows: list[tuple[str, Any]] = [
            (op.operation_id, f"{op.status} {op.completed:g} {op.message}".rstrip())
            for op in self.operations
        ] or [("operations", "none")]
        return rows + self.page_rows()


@tool(read_only=True, idempotent=True)
def list_operations(
    *,
    tool_name: Annotated[
        str | None, Field(pattern=r"^[a-z0-9_]+$", description="Only this tool's operations.")
    ] = None,
    status: Annotated[OperationStatus | None, Field(description="Only these.")] = None,
    limit: Annotated[int, Field(ge=1, le=50, description="At most this many.")] = 20,
    cursor: Cursor = None,
    progress: Progress | None = None,
) -> OperationList:
    """List long operations recorded here, newest first: id, status, progress.

    Builds, pushes, test runs; get_operation gives one in full."""
    page = operations.page_records(tool_name, status, limit, cursor)
    listed = [OperationState.of(record) for record in page.items]
    return OperationList.page(page.last, page.more, operations=listed)


main = main_for(list_operations)


if __name__ == "__main__":
    main()
