"""deploy_model_server: serve an exported model behind an OpenAI-compatible API."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Annotated

from pydantic import Field

from commands._cli import main_for
from skills.model_server.base import ModelSource, ServerName, ServerState
from skills.model_server.serve import deploy
from skills.model_server.targets_by_name import ServerTargetSettings
from skills.shared.progress import Progress
from skills.shared.tooling import WaitSeconds, spec_of, tool


@tool(read_only=False, long=True)
def deploy_model_server(
    *,
    name: ServerName,
    model: ModelSource,
    target: ServerTargetSettings,
    dry_run: Annotated[
        bool, Field(strict=True, description="Return the plan; start nothing.")
    ] = False,
    wait_seconds: WaitSeconds = None,
    progress: Progress | None = None,
) -> ServerState:
    """Serve an exported model (OpenAI-compatible API) and smoke-test it; returns its
    endpoint and curl line. With replicas, scales a running server."""
    return deploy(
        spec_of(deploy_model_server), name, model, target, dry_run, wait_seconds, progress
    )


main = main_for(deploy_model_server)


if __name__ == "__main__":
    main()
