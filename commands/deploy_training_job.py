"""deploy_training_job: plan, start and follow a distributed FSDP training job."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

import contextlib
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field

from commands._cli import main_for
from skills.job_doctor.auto_retry import require_support
from skills.job_doctor.auto_retry import run as auto_retry_loop
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.next_step import NextStep
from skills.shared.progress import Progress
from skills.shared.tooling import Flatten, WaitSeconds, tool
from skills.training_job_deployer.job_cost import dry_run_cost
from skills.training_job_deployer.job_spec import DryRun, JobSpec
from skills.training_job_deployer.memory_estimate import model_label, toy_model_warning
from skills.training_job_deployer.targets.registry import DeployResult, DeploySettings, get_target

if TYPE_CHECKING:
    from skills.operations.operation_state import OperationState


# destructive: replace=true deletes a job of the same name (a running one only with confirm).
@tool(read_only=False, destructive=True, long=True)
def deploy_training_job(
    *,
    job: Annotated[JobSpec, Flatten()],
    target: DeploySettings,
    dry_run: DryRun = False,
    replace_corrupt_record: Annotated[
        bool,
        Field(
            strict=True,
            description="Set a corrupt job record aside.",
        ),
    ] = False,
    auto_retry: Annotated[
        bool, Field(strict=True, description="On failure: diagnose, fix, resubmit (resumes).")
    ] = False,
    max_retries: Annotated[int, Field(ge=0, le=20, description="Most auto_retry resubmits.")] = 3,
    monitor: Annotated[
        bool, Field(strict=True, description="Follow the job (false: return once started).")
    ] = True,
    include_plan: Annotated[
        bool, Field(strict=True, description="Return the plan after a submit too.")
    ] = False,
    wait_seconds: WaitSeconds = None,
    progress: Progress | None = None,
) -> DeployResult:
    """Start a distributed PyTorch FSDP2 training job (local torchrun, a Kubernetes
    PyTorchJob or Slurm) and follow it; dry_run=true shows the plan first.

    kubernetes: the image is image_uri, else the newest in repository. A re-run
    resumes from its newest checkpoint. auto_retry runs as an operation: the
    result's next_step follows it.
    """
    if not monitor:  # `--no-monitor`: start it and return (as wait_seconds=0)
        wait_seconds = 0
    runner = get_target(target)
    job = runner.fitted(job)  # e.g. gpu_per_node from the instance type, for every attempt
    if auto_retry:
        require_support(runner)
    plan = _plan(runner, job, target, _retry_args(auto_retry, max_retries))
    named = {"model": model_label(job), "warnings": _model_warnings(job, runner)}
    if dry_run:
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
                arguments={**_call_args(job, target), **_retry_args(auto_retry, max_retries)},
                why="submit this plan",
            ),
            cost=dry_run_cost(job, plan, runner),
        )
    if auto_retry and wait_seconds is not None:  # an agent: never hold one call
        result = _as_operation(job, target, max_retries, replace_corrupt_record, wait_seconds,
                               plan, progress)  # fmt: skip
        return _with_plan(result, include_plan)
    if auto_retry:  # the CLI (or the operation's worker): in the foreground
        try:
            fields = auto_retry_loop(
                job, target, max_retries=max_retries, progress=progress,
                replace_corrupt_record=replace_corrupt_record,
            )  # fmt: skip
        except KeyboardInterrupt:  # a person's Ctrl-C: stop the job too, as below
            with contextlib.suppress(ToolFailure):  # between attempts there may be none
                get_target(target).cancel(job.job_name, grace_s=10)
            raise
        return _with_plan(DeployResult(**fields), include_plan)
    runner.submit(job.job_name, plan, replace_corrupt_record=replace_corrupt_record)
    try:
        state = runner.follow(job.job_name, progress, wait_seconds)
    except KeyboardInterrupt:
        # The job runs in its own session; a person's Ctrl-C means stop it too. (An MCP
        # client's cancel only stops following: the job goes on, as after wait_seconds.)
        runner.cancel(job.job_name, grace_s=10)
        raise
    fields = state.model_dump()
    fields["warnings"] = [*named["warnings"], *fields["warnings"]]
    result = DeployResult(**{**fields, "model": named["model"]}, plan=plan)
    return _with_plan(result, include_plan)


def _model_warnings(job: JobSpec, runner: Any) -> list[str]:
    """A toy model on a cluster is said loudly: the default trains 0.5M parameters."""
    toy = toy_model_warning(job) if runner.on_cluster else None
    return [toy] if toy else []


def _plan(runner: Any, job: JobSpec, target: Any, retry_args: dict[str, Any]) -> Any:
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


def _retry_args(auto_retry: bool, max_retries: int) -> dict[str, Any]:
    return {"auto_retry": True, "max_retries": max_retries} if auto_retry else {}


def _with_plan(result: DeployResult, include_plan: bool) -> DeployResult:
    result.show_plan(include_plan)
    return result


def _as_operation(
    job: JobSpec,
    target: Any,
    max_retries: int,
    replace_corrupt_record: bool,
    wait_seconds: float,
    plan: Any,
    progress: Progress | None,
) -> DeployResult:
    """This same call, detached as an operation (its worker runs the loop to the end); the
    result once it ended within wait_seconds, else how to follow it."""
    from skills.operations.operations import run_as_operation
    from skills.shared.tooling import spec_of

    arguments = {
        **_call_args(job, target),
        "auto_retry": True,
        "max_retries": max_retries,
        "replace_corrupt_record": replace_corrupt_record,
        "wait_seconds": wait_seconds,
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
        spec_of(deploy_training_job),
        arguments,
        progress,
        result=DeployResult,
        ended=lambda result, state: result.model_copy(update={"operation_id": state.operation_id}),
        running=running,
        failed="The auto-retry run failed.",
    )


main = main_for(deploy_training_job)


if __name__ == "__main__":
    main()
