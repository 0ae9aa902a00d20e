"""delete_model_server: stop a model server and remove it (needs confirm=True)."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Annotated

from pydantic import Field

from commands._cli import main_for
from skills.model_server.base import ServerName, ServerState
from skills.model_server.targets_by_name import ServerTargetAccess, get_server_target
from skills.shared.confirm import Confirm, require_confirm
from skills.shared.progress import Progress
from skills.shared.tooling import tool


@tool(read_only=False, destructive=True)
def delete_model_server(
    *,
    name: ServerName,
    target: ServerTargetAccess,
    confirm: Annotated[
        Confirm, Field(description="Must be true: the endpoint stops answering.")
    ] = False,
    progress: Progress | None = None,
) -> ServerState:
    """Stop a model server and remove it (needs confirm=true)."""
    require_confirm(confirm, f"Deleting model server {name!r} stops its endpoint.")
    return get_server_target(target).delete(name, target)


main = main_for(delete_model_server)


if __name__ == "__main__":
    main()
