"""list_model_servers: the model servers a target runs."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Annotated, Any

from pydantic import Field

from commands._cli import main_for
from skills.model_server.base import ServerState
from skills.model_server.targets_by_name import ServerTargetAccess, get_server_target
from skills.shared.paging import Cursor, Paged
from skills.shared.progress import Progress
from skills.shared.results import without_unset
from skills.shared.tooling import tool

# A list says which servers and how they stand; get_model_server gives one in full.
LISTED_SERVER_DETAIL = {"curl", "smoke", "message", "plan", "cost", "next_step"}


class ServerList(Paged):
    servers: list[ServerState]

    def left_out_over_mcp(self) -> dict[str, Any]:
        return {"servers": {"__all__": LISTED_SERVER_DETAIL}}

    def compact(self, data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "servers": without_unset(data["servers"])}

    def summary_rows(self) -> list[tuple[str, Any]]:
        rows: list[tuple[str, Any]] = [
            (s.name, f"{s.status} {s.endpoint or ''} {s.model}".strip()) for s in self.servers
        ] or [("servers", "none")]
        return rows + self.page_rows()


@tool(read_only=True, idempotent=True)
def list_model_servers(
    *,
    target: ServerTargetAccess,
    limit: Annotated[int, Field(ge=1, le=200, description="At most this many.")] = 50,
    cursor: Cursor = None,
    progress: Progress | None = None,
) -> ServerList:
    """List the model servers a target runs, by name, with status and endpoint."""
    page = get_server_target(target).list(target, limit, cursor)
    return ServerList.page(page.last, page.more, servers=page.items)


main = main_for(list_model_servers)


if __name__ == "__main__":
    main()
