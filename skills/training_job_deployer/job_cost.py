"""A training job's cost for its dry run: the instances its plan holds, per hour, and
the hours for max_steps when an earlier attempt of the same job measured its step
time (read from that attempt's log, on any target). An estimate never blocks: what
cannot be read or priced becomes a note."""

from __future__ import annotations

from typing import Any

from skills.catalog.pricing import estimate_billing
from skills.shared.errors import ToolFailure
from skills.training_job_deployer.job_spec import JobSpec
from skills.training_job_deployer.targets.base import Plan, Target
from skills.training_job_deployer.trainer_log import StepTime, measured_step_time

# Log lines read from the earlier attempt: the trainer logs a step line every log_freq
# steps, so this holds many step lines and little else.
LOG_LINES = 2000


def previous_step_time(runner: Target[Any], job_name: str) -> StepTime | None:
    """The step time an earlier attempt of this job logged; None when there is none
    (no such job, no log, no step lines, the cluster out of reach)."""
    try:
        return measured_step_time(runner.logs(job_name, tail_lines=LOG_LINES))
    except ToolFailure:
        return None


def dry_run_cost(job: JobSpec, plan: Plan, runner: Target[Any]) -> dict[str, Any] | None:
    """The estimate (its model_dump) for what the plan would hold; None when nothing
    is billed (this host)."""
    billing = plan.billing()
    if billing is None:
        return None
    step = None
    if billing.instance_type and job.max_steps:
        step = previous_step_time(runner, job.job_name)
    hours = None if step is None or not job.max_steps else job.max_steps * step.seconds / 3600
    estimate = estimate_billing(billing, hours)
    if not job.max_steps:
        estimate.notes.append("per hour only: max_steps not given (the trainer's default)")
    elif step is None:
        estimate.notes.append(
            "per hour only: no earlier attempt of this job measured its step time"
        )
    else:
        ran_on = f" on {step.world_size} processes" if step.world_size else ""
        estimate.notes.append(
            f"hours for max_steps={job.max_steps}: {step.seconds:.3f} s/step measured by an "
            f"earlier attempt of {job.job_name}{ran_on} over {step.steps} steps"
        )
    return estimate.model_dump(mode="json")
