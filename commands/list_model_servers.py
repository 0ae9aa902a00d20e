"""list_model_servers: the model servers a target runs."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Any

from commands._cli import main_for
from skills.model_server.base import ServerState
from skills.model_server.registry import ServerTargetAccess, get_server_target
from skills.shared.progress import Progress
from skills.shared.results import ToolResult, without_unset
from skills.shared.tooling import tool

# A list says which servers and how they stand; get_model_server gives one in full.
LISTED_SERVER_DETAIL = {"curl", "smoke", "message", "plan", "cost", "next_step"}


class ServerList(ToolResult):
    servers: list[ServerState]

    def left_out_over_mcp(self) -> dict[str, Any]:
        return {"servers": {"__all__": LISTED_SERVER_DETAIL}}

    def compact(self, data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "servers": without_unset(data["servers"])}

    def summary_rows(self) -> list[tuple[str, Any]]:
        if not self.servers:
            return [("servers", "none")]
        return [(s.name, f"{s.status} {s.endpoint or ''} {s.model}".strip()) for s in self.servers]


@tool(read_only=True, idempotent=True)
def list_model_servers(
    *, target: ServerTargetAccess, progress: Progress | None = None
) -> ServerList:
    """List the model servers a target runs, with status and endpoint."""
    return ServerList(servers=get_server_target(target).list(target))


main = main_for(list_model_servers)


if __name__ == "__main__":
    main()
