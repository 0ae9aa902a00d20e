"""deploy_training_job's one call: the target's plan (fitted to the instance type), a
dry run's plan and cost, or the submit followed to its end; with auto_retry, the
doctor's loop (auto_retry.py), in the foreground for the CLI and the operation's
worker, as an operation for an agent (its state mapped back). The targets know
nothing of it."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skills.job_orchestration.auto_retry import require_support
from skills.job_orchestration.auto_retry import run as auto_retry_loop
from skills.operations.operations import run_as_operation
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.next_step import NextStep
from skills.shared.progress import Progress
from skills.shared.tooling import ToolSpec
from skills.training_job_deployer.job_cost import dry_run_cost
from skills.training_job_deployer.job_spec import JobSpec
from skills.training_job_deployer.memory_estimate import (
    alias_note,
    model_label,
    toy_model_warning,
)
from skills.training_job_deployer.targets.base import Plan, Target
from skills.training_job_deployer.targets.by_name import DeployResult, get_target
from skills.training_job_deployer.trainer_checks import check_trainer_config

if TYPE_CHECKING:
    from skills.operations.operation_state import OperationState


@dataclass(frozen=True)
class DeployCall:
    """deploy_training_job's arguments (the command's signature gives each its default)."""

    job: JobSpec
    target: Any  # one target's deploy settings (by_name.DeploySettings)
    dry_run: bool
    replace_corrupt_record: bool
    auto_retry: bool
    max_retries: int
    include_plan: bool
    wait_seconds: float | None  # 0: return once started (--no-monitor)


def deploy(tool: ToolSpec, call: DeployCall, progress: Progress | None) -> DeployResult:
    """`tool` is deploy_training_job's own spec: an auto_retry operation runs it again."""
    runner = get_target(call.target)
    job = runner.fitted(call.job)  # e.g. gpu_per_node from the instance type, for every attempt
    # What the trainer refuses at start, refused before anything is planned.
    check_trainer_config(job, call.target.job_runs_here, runner.host_gpus())
    if call.auto_retry:
        require_support(runner)
    plan = _plan(runner, job, call.target, _retry_args(call))
    named = {"model": model_label(job), "warnings": _model_warnings(job, runner)}
    if call.dry_run:
        return DeployResult(
            job_name=job.job_name,
            target=runner.name,
            status="planned",
            dry_run=True,
            plan=plan,
            **named,
            max_steps=job.max_steps,
            run_dir=getattr(plan, "run_dir", None),
            log_path=getattr(plan, "log_path", None),
            next_step=NextStep(
                tool="deploy_training_job",
                arguments={**_call_args(job, call.target), **_retry_args(call)},
                why="submit this plan",
            ),
            cost=dry_run_cost(job, plan, runner),
        )
    if call.auto_retry and call.wait_seconds is not None:  # an agent: never hold one call
        result = _as_operation(tool, call, job, plan, progress)
        return _with_plan(result, call.include_plan)
    if call.auto_retry:  # the CLI (or the operation's worker): in the foreground
        try:
            fields = auto_retry_loop(
                job,
                call.target,
                max_retries=call.max_retries,
                progress=progress,
                replace_corrupt_record=call.replace_corrupt_record,
            )
        except KeyboardInterrupt:  # a person's Ctrl-C: stop the job too, as below
            with contextlib.suppress(ToolFailure):  # between attempts there may be none
                get_target(call.target).cancel(job.job_name, grace_s=10)
            raise
        return _with_plan(DeployResult(**fields), call.include_plan)
    runner.submit(job.job_name, plan, replace_corrupt_record=call.replace_corrupt_record)
    try:
        state = runner.follow(job.job_name, progress, call.wait_seconds)
    except KeyboardInterrupt:
        # The job runs in its own session; a person's Ctrl-C means stop it too. (An MCP
        # client's cancel only stops following: the job goes on, as after wait_seconds.)
        runner.cancel(job.job_name, grace_s=10)
        raise
    fields = state.model_dump()
    fields["warnings"] = [*named["warnings"], *fields["warnings"]]
    result = DeployResult(**{**fields, "model": named["model"]}, plan=plan)
    return _with_plan(result, call.include_plan)


def _model_warnings(job: JobSpec, runner: Target[Any]) -> list[str]:
    """A toy model on a cluster is said loudly (the default trains 0.5M parameters), and
    so is the size an alias (llama_v3) means."""
    toy = toy_model_warning(job) if runner.on_cluster else None
    return [w for w in (toy, alias_note(job)) if w]


def _plan(runner: Target[Any], job: JobSpec, target: Any, retry_args: dict[str, Any]) -> Plan:
    """The target's plan. A refusal of more GPUs per node than the instance type has
    carries, as its next step, the dry run of this call with the most it has."""
    try:
        return runner.plan(job)
    except ToolFailure as failure:
        most = failure.details.get("instance_gpus")
        if failure.code == ErrorCode.NOT_ENOUGH_GPUS and isinstance(most, int) and most > 0:
            fitted = job.model_copy(update={"gpu_per_node": most})
            failure.next_step = failure.next_step or NextStep(
                tool="deploy_training_job",
                arguments={**_call_args(fitted, target), **retry_args, "dry_run": True},
                why=f"plan it with gpu_per_node={most}",
            )
        raise


def _call_args(job: JobSpec, target: Any) -> dict[str, Any]:
    """This call's job and target as flat arguments (a next step's)."""
    return {
        **job.model_dump(mode="json", exclude_defaults=True),
        **target.model_dump(mode="json", exclude_defaults=True),
        "target": target.target,
    }


def _retry_args(call: DeployCall) -> dict[str, Any]:
    return {"auto_retry": True, "max_retries": call.max_retries} if call.auto_retry else {}


def _with_plan(result: DeployResult, include_plan: bool) -> DeployResult:
    result.show_plan(include_plan)
    return result


def _as_operation(
    tool: ToolSpec, call: DeployCall, job: JobSpec, plan: Any, progress: Progress | None
) -> DeployResult:
    """This same call, detached as an operation (its worker runs the loop to the end); the
    result once it ended within wait_seconds, else how to follow it. `job` is the call's,
    fitted to the target."""
    target = call.target
    arguments = {
        **_call_args(job, target),
        "auto_retry": True,
        "max_retries": call.max_retries,
        "replace_corrupt_record": call.replace_corrupt_record,
        "wait_seconds": call.wait_seconds,
    }

    def running(state: OperationState) -> DeployResult:
        return DeployResult(
            job_name=job.job_name,
            target=target.target,
            status="running",
            plan=plan,
            max_steps=job.max_steps,
            operation_id=state.operation_id,
            message=f"auto-retry running as operation {state.operation_id}: {state.message}",
            next_step=state.next_step,
        )

    return run_as_operation(
        tool,
        arguments,
        progress,
        result=DeployResult,
        ended=lambda result, state: result.model_copy(update={"operation_id": state.operation_id}),
        running=running,
        failed="The auto-retry run failed.",
    )
