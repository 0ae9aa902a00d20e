"""deploy_model_server: serve an exported model behind an OpenAI-compatible API."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Annotated, Any

from pydantic import Field

from commands._cli import main_for
from skills.model_server.base import ModelSource, ServerName, ServerSettings, ServerState
from skills.model_server.registry import ServerTargetSettings, get_server_target
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.next_step import POLL_WAIT_S, NextStep
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
    """Serve an exported model behind an OpenAI-compatible API, smoke-test it; returns
    the endpoint and a curl line. Given replicas, a running server scales."""
    runner = get_server_target(target)
    replicas = getattr(target, "replicas", None)
    if replicas is not None and "replicas" in target.model_fields_set and not dry_run:
        existing = _existing(runner, name, target)
        if existing is not None:
            return runner.scale(name, replicas, target)
    plan = runner.plan(name, model, target)
    if dry_run:
        return ServerState(
            name=name,
            target=runner.name,
            status="planned",
            model=plan.model,
            plan=plan,
            cost=_cost(runner, target),
            message="dry run: nothing was started",
            next_step=NextStep(
                tool="deploy_model_server",
                arguments={
                    "name": name,
                    "model": model,
                    **target.model_dump(mode="json", exclude_unset=True),
                    "target": runner.name,
                },
                why="start this plan",
            ),
        )
    if wait_seconds is not None:  # an agent: the start runs on as an operation
        return _as_operation(name, model, target, wait_seconds, progress)
    return runner.deploy(plan, target, progress, wait_seconds)  # type: ignore[arg-type]


def _cost(runner: Any, settings: ServerSettings) -> dict[str, Any] | None:
    billing = runner.billing(settings)
    if billing is None:
        return None
    from skills.catalog.pricing import estimate_instances

    return estimate_instances(*billing).model_dump(mode="json")


def _existing(runner: Any, name: str, settings: ServerSettings) -> ServerState | None:
    try:
        state = runner.get(name, settings)
    except ToolFailure as failure:
        if failure.code == ErrorCode.NOT_FOUND:
            return None
        raise
    return None if state.status in ("deleted", "failed") else state


def _as_operation(
    name: str, model: str, target: Any, wait_seconds: float, progress: Progress | None
) -> ServerState:
    """This call, detached as an operation whose worker starts the server and follows
    it to ready; its result once that happened within wait_seconds, else how to follow."""
    from skills.operations import operations

    arguments = {
        **target.model_dump(mode="json", exclude_defaults=True),
        "target": target.target,
        "name": name,
        "model": model,
        "wait_seconds": wait_seconds,
    }
    state = operations.call(spec_of(deploy_model_server), arguments, progress)
    if isinstance(state.result, ServerState):
        return state.result
    if state.status == "running":
        return ServerState(
            name=name,
            target=target.target,
            status="starting",
            model=model,
            message=f"starting as operation {state.operation_id}: {state.message}",
            next_step=NextStep(
                tool="get_operation",
                arguments={"operation_id": state.operation_id, "wait_seconds": POLL_WAIT_S},
                why="follow the start to ready",
            ),
        )
    raise state.as_failure("Starting the model server failed.")


main = main_for(deploy_model_server)


if __name__ == "__main__":
    main()
