"""deploy_model_server's one call: a running server scaled when replicas are given, a
dry run's plan and cost, the start as an operation for an agent (its state mapped back),
or the start in the foreground for the CLI and the operation's worker."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skills.catalog.pricing import estimate_billing
from skills.model_server.base import ServerSettings, ServerState, ServerTarget
from skills.model_server.targets_by_name import get_server_target
from skills.operations.operations import run_as_operation
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.next_step import POLL_WAIT_S, NextStep
from skills.shared.progress import Progress
from skills.shared.tooling import ToolSpec

if TYPE_CHECKING:
    from skills.operations.operation_state import OperationState


def deploy(
    tool: ToolSpec,
    name: str,
    model: str,
    target: ServerSettings,
    dry_run: bool,
    wait_seconds: float | None,
    progress: Progress | None,
) -> ServerState:
    """`tool` is deploy_model_server's own spec: the operation runs it again."""
    runner = get_server_target(target)
    if not dry_run and (scaled := scale_if_running(runner, name, target)) is not None:
        return scaled
    plan = runner.plan(name, model, target)
    if dry_run:
        return ServerState(
            name=name,
            target=runner.name,
            status="planned",
            model=plan.model,
            plan=plan,
            cost=cost(runner, target),
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
    runner.require_startable(target)
    if wait_seconds is not None:  # an agent: the start runs on as an operation
        return _as_operation(tool, name, model, target, wait_seconds, progress)
    return runner.deploy(plan, target, progress, wait_seconds)  # type: ignore[arg-type]


def scale_if_running(
    runner: ServerTarget[Any, Any], name: str, settings: ServerSettings
) -> ServerState | None:
    """Given replicas (set by the caller), a server of that name that runs is scaled,
    not started again; None: start it."""
    replicas = getattr(settings, "replicas", None)
    if replicas is None or "replicas" not in settings.model_fields_set:
        return None
    if _existing(runner, name, settings) is None:
        return None
    return runner.scale(name, replicas, settings)


def cost(runner: ServerTarget[Any, Any], settings: ServerSettings) -> dict[str, Any] | None:
    """The dry run's estimate (its model_dump); None when nothing is billed (this host)."""
    billing = runner.billing(settings)
    return None if billing is None else estimate_billing(billing).model_dump(mode="json")


def _existing(
    runner: ServerTarget[Any, Any], name: str, settings: ServerSettings
) -> ServerState | None:
    try:
        state = runner.get(name, settings)
    except ToolFailure as failure:
        if failure.code == ErrorCode.NOT_FOUND:
            return None
        raise
    return None if state.status in ("deleted", "failed") else state


def _as_operation(
    tool: ToolSpec,
    name: str,
    model: str,
    target: Any,
    wait_seconds: float,
    progress: Progress | None,
) -> ServerState:
    """This call, detached as an operation whose worker starts the server and follows
    it to ready; its result once that happened within wait_seconds, else how to follow."""
    arguments = {
        **target.model_dump(mode="json", exclude_defaults=True),
        "target": target.target,
        "name": name,
        "model": model,
        "wait_seconds": wait_seconds,
    }

    def running(state: OperationState) -> ServerState:
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

    return run_as_operation(
        tool,
        arguments,
        progress,
        result=ServerState,
        ended=lambda result, _state: result,
        running=running,
        failed="Starting the model server failed.",
    )
