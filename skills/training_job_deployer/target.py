"""The interface every target implements (local torchrun, Kubernetes, Slurm), in the
shape of torchx's schedulers: plan -> submit -> describe/follow -> logs -> cancel,
plus list. `submit` runs exactly the plan that `plan` returned, so a dry run cannot
lie. A target is one module with a settings model, a plan model and a class; it is
added with one line in targets.py and no tool changes."""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from skills.shared.progress import Progress
from skills.training_job_deployer.job_spec import JobSpec
from skills.training_job_deployer.models import JobState


class TargetSettings(BaseModel):
    """Where and how a job runs, beyond the job itself. Each target's subclass has a
    `target: Literal["<name>"]` field, which tells the settings apart; its docstring's
    first line completes "'<name>' ..." in the tools' `target` description."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @property
    def job_runs_here(self) -> bool:
        """Whether the job's own paths (dataset, checkpoint_dir, ...) are on this host;
        a cluster's are not, so an MCP caller's workspace does not confine them."""
        return True


class Plan(BaseModel):
    """Exactly what submit will do, as data. Each target's subclass has a
    `target: Literal["<name>"]` field."""

    def to_display(self) -> list[tuple[str, Any]]:
        """Rows a person reads for a dry run."""
        raise NotImplementedError

    def plain_text(self) -> str | None:
        """What a dry run prints as it is instead of the rows (a batch script), if any."""
        return None


# Each target takes back the plan type its plan() makes (LocalTarget.submit: LocalPlan).
PlanT = TypeVar("PlanT", bound=Plan)


class Target(Protocol[PlanT]):
    name: ClassVar[str]
    settings_model: ClassVar[type[TargetSettings]]
    plan_model: ClassVar[type[Plan]]

    def plan(self, spec: JobSpec) -> PlanT:
        """The exact request submit would make; starts and writes nothing."""
        ...

    def submit(self, job_name: str, plan: PlanT, *, replace_corrupt_record: bool = False) -> None:
        """Make the request the plan describes, holding the job's lock: a job of that name
        already running is a job_running failure; an unreadable record of the job is
        job_record_corrupt unless `replace_corrupt_record` sets it aside."""
        ...

    def follow(
        self, job_name: str, progress: Progress | None = None, wait_seconds: float | None = None
    ) -> JobState:
        """The job's state once it ends or `wait_seconds` pass (None: until it ends),
        reporting each logged step; describe() is follow with no wait."""
        ...

    def describe(self, job_name: str) -> JobState: ...

    def logs(
        self,
        job_name: str,
        tail_lines: int | None = None,
        *,
        replica: str | None = None,
        previous: bool = False,
        since_seconds: int | None = None,
        all_ranks: bool = False,
    ) -> str:
        """The last lines of the job's log, secrets masked. `options` (replica, previous,
        since_seconds, all_ranks) are for cluster targets; others refuse them with
        unsupported_for_target."""
        ...

    def log_path(self, job_name: str) -> str:
        """Where the log is, as a person would open it (a path, a pod, a file on a node)."""
        ...

    def cancel(self, job_name: str, grace_s: float = 30.0) -> JobState:
        """Stop the job (checkpoints stay); a job that ended already is left as it is."""
        ...

    def list_jobs(self) -> list[JobState]:
        """Every job this target knows, newest first."""
        ...

    # Optional: `deploy_settings_model` (deploy_training_job's settings when they extend
    # settings_model) and `delete(job_name) -> JobState` (delete_training_job).
