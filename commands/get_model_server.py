"""get_model_server: one model server's status, endpoint and curl line."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from commands._cli import main_for
from skills.model_server.base import ServerName, ServerState
from skills.model_server.targets_by_name import ServerTargetAccess, get_server_target
from skills.shared.progress import Progress
from skills.shared.tooling import tool


@tool(read_only=True, idempotent=True)
def get_model_server(
    *, name: ServerName, target: ServerTargetAccess, progress: Progress | None = None
) -> ServerState:
    """A model server's status, endpoint (base URL) and a curl line."""
    return get_server_target(target).get(name, target)


main = main_for(get_model_server)


if __name__ == "__main__":
    main()
