"""The interface every target implements (local torchrun, Kubernetes, Slurm), in the
shape of torchx's schedulers: plan -> submit -> describe/follow -> logs -> cancel,
plus list. `submit` runs exactly the plan that `plan` returned, so a dry run cannot
lie. A target is one subpackage with a settings model, a plan model and a subclass of
`Target`; it is added with one line in by_name.py and no tool changes.

Every method a tool calls is defined here. What a target cannot do is said by its
`capabilities`, never found by probing for a method: the defaults of the optional
methods answer a typed unsupported_for_target failure with a hint."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from skills.catalog.pricing import Billing
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.log_tail import LastLines, last_lines
from skills.shared.paging import Page
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

    async_save: str | None = Field(
        default=None, description="Async saves: on or off, the copy each node stages, where."
    )
    process_group: str | None = Field(
        default=None, description="The trainer's process-group backend(s) on the nodes."
    )

    def billing(self) -> Billing | None:
        """The instances the job would hold, for a dry run's cost; None: nothing is
        billed (this host, or nodes of unknown type)."""
        return None

    def to_display(self) -> list[tuple[str, Any]]:
        """Rows a person reads for a dry run."""
        raise NotImplementedError

    def plain_text(self) -> str | None:
        """What a dry run prints as it is instead of the rows (a batch script), if any."""
        return None


class Capability(str, Enum):
    """What a target can do beyond plan/submit/follow/logs/cancel/list."""

    DELETE = "delete"  # delete(job_name): remove the job object (a cluster's)
    SNAPSHOT = "snapshot"  # snapshot(job_name): the job doctor's input
    AUTO_RETRY = "auto_retry"  # snapshot + retry_facts: the doctor's retry loop
    LOG_OPTIONS = "log_options"  # logs(replica=, previous=, since_seconds=, all_ranks=)
    QUARANTINE = "quarantine"  # quarantine(nodes, ...): take a failed node out of service


@dataclass(frozen=True)
class JobPage:
    """Which jobs a list returns: `limit` of them (None: all) after the `cursor` (a
    skills.shared.paging cursor: newest submission first, then by name), only those in
    `status` when given."""

    limit: int | None = None
    cursor: str | None = None
    status: str | None = None


EVERY_JOB = JobPage()  # no limit, no filter


@dataclass(frozen=True)
class LogOptions:
    """logs' options for a target with one log per pod (Capability.LOG_OPTIONS)."""

    replica: str | None = None
    previous: bool = False
    since_seconds: int | None = None
    all_ranks: bool = False

    def chosen(self) -> list[str]:
        return [k for k, v in asdict(self).items() if v not in (None, False)]


def unsupported(target: str, message: str, hint: str, **details: Any) -> ToolFailure:
    return ToolFailure(
        ErrorCode.UNSUPPORTED_FOR_TARGET, message, hint, {"target": target, **details}
    )


# What a target without the capability answers: message ({name}: the target's), hint.
_WITHOUT: dict[Capability, tuple[str, str]] = {
    Capability.DELETE: (
        "The {name} target has no delete.",
        "Use cancel_training_job to stop the job.",
    ),
    Capability.SNAPSHOT: (
        "The job doctor cannot read target={name!r}: it reads a cluster's pods.",
        "Read the job's log (get_training_job_logs) and its error (get_training_job).",
    ),
    Capability.AUTO_RETRY: (
        "auto_retry needs the job doctor, which target={name!r} does not have.",
        "Use target=kubernetes for auto_retry, or deploy without it and re-run by hand "
        "(a re-run resumes from the newest checkpoint).",
    ),
    Capability.QUARANTINE: (
        "target={name!r} has no nodes to quarantine.",
        "Take the node out of service by the scheduler's own means.",
    ),
}


@dataclass(frozen=True)
class Quarantined:
    """What quarantine did: the nodes it took out of service and, when too few nodes are
    left for the job, why and the call that adds one (None: enough are left)."""

    nodes: tuple[str, ...]
    short: str | None = None
    next_step: dict[str, Any] | None = None


# Each target's own Plan subclass: what its plan returns is what its submit takes.
PlanT = TypeVar("PlanT", bound="Plan")


class Target(ABC, Generic[PlanT]):
    name: ClassVar[str]
    settings_model: ClassVar[type[TargetSettings]]
    # deploy_training_job's settings: the settings plus how to place a job (a target
    # without such settings leaves it to settings_model, see __init_subclass__).
    deploy_settings_model: ClassVar[type[TargetSettings]]
    plan_model: ClassVar[type[Plan]]
    capabilities: ClassVar[frozenset[Capability]] = frozenset()
    # Whether jobs run on a cluster's nodes (paid GPUs), where a toy model is a mistake.
    on_cluster: ClassVar[bool] = True
    # Seconds between looks at a job while following it (each target its own cadence).
    poll_s: ClassVar[float] = 1.0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "settings_model" in cls.__dict__ and "deploy_settings_model" not in cls.__dict__:
            cls.deploy_settings_model = cls.settings_model

    def call_args(self) -> dict[str, Any]:
        """This target as the job tools' flat arguments (get/cancel/logs: `target` and
        its settings_model fields that differ from their defaults), for next steps."""
        settings = getattr(self, "settings", None)
        data = settings.model_dump(mode="json", exclude_defaults=True) if settings else {}
        fields = set(self.settings_model.model_fields) - {"target"}
        return {"target": self.name, **{k: v for k, v in data.items() if k in fields}}

    def can(self, capability: Capability) -> bool:
        return capability in self.capabilities

    def require(self, capability: Capability, **details: Any) -> None:
        """unsupported_for_target, with a hint, unless the target has the capability."""
        if not self.can(capability):
            message, hint = _WITHOUT[capability]
            raise unsupported(
                self.name, message.format(name=self.name), hint.format(name=self.name), **details
            )

    # what every target does -------------------------------------------------------------

    def host_gpus(self) -> int | None:
        """The GPUs each host of a job has, where this target knows before planning
        (None: it does not; the trainer's start-up checks that need them wait)."""
        return None

    def fitted(self, spec: JobSpec) -> JobSpec:
        """The job with the defaults this target's settings decide (a Kubernetes job on a
        known instance type: gpu_per_node = its GPUs); plan applies it too."""
        return spec

    @abstractmethod
    def plan(self, spec: JobSpec) -> PlanT:
        """The exact request submit would make; starts and writes nothing."""

    @abstractmethod
    def submit(self, job_name: str, plan: PlanT, *, replace_corrupt_record: bool = False) -> None:
        """Make the request the plan describes, holding the job's lock: a job of that name
        already running is a job_running failure; an unreadable record of the job is
        job_record_corrupt unless `replace_corrupt_record` sets it aside."""

    @abstractmethod
    def follow(
        self, job_name: str, progress: Progress | None = None, wait_seconds: float | None = None
    ) -> JobState:
        """The job's state once it ends or `wait_seconds` pass (None: until it ends),
        reporting each logged step."""

    def place(self, job_name: str) -> str:
        """Where the job is, in a few words for messages ("<namespace>/<job>")."""
        return job_name

    def describe(self, job_name: str) -> JobState:
        """The job's state now: follow with no wait."""
        return self.follow(job_name, wait_seconds=0)

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
        """The last lines of the job's log, secrets masked. The options are for targets
        with Capability.LOG_OPTIONS; others refuse them with unsupported_for_target."""
        options = LogOptions(replica, previous, since_seconds, all_ranks)
        return self.read_logs(job_name, tail_lines, self._checked(options))

    def log_tail(
        self,
        job_name: str,
        tail_lines: int,
        max_bytes: int,
        *,
        before: int | None = None,
        replica: str | None = None,
        previous: bool = False,
        since_seconds: int | None = None,
        all_ranks: bool = False,
    ) -> LastLines:
        """The log's last `tail_lines` lines (before byte `before`, a cut result's cursor)
        whole, or as many as fit in `max_bytes` of text, secrets masked (the logs tool)."""
        options = self._checked(LogOptions(replica, previous, since_seconds, all_ranks))
        return self.read_log_tail(job_name, tail_lines, max_bytes, before, options)

    def read_log_tail(
        self,
        job_name: str,
        tail_lines: int,
        max_bytes: int,
        before: int | None,
        options: LogOptions,
    ) -> LastLines:
        """log_tail, options checked. By default from read_logs' text (already bounded by
        the target), cut to the budget from its end; no byte cursor into it."""
        if before is not None:
            raise unsupported(
                self.name,
                f"The {self.name} target reads a log by lines from its end, not from a byte.",
                "Leave `before` out; a smaller tail_lines or since_seconds narrows the log.",
                fields=["before"],
            )
        data = self.read_logs(job_name, tail_lines, options).encode()
        found = last_lines(lambda at, size: data[at : at + size], len(data), tail_lines, max_bytes)
        found.start = None  # a place in this call's text, not in the log: no cursor
        return found

    def _checked(self, options: LogOptions) -> LogOptions:
        chosen = options.chosen()
        if chosen and not self.can(Capability.LOG_OPTIONS):
            raise unsupported(
                self.name,
                f"The {self.name} target has one log per job; {', '.join(chosen)} do not apply.",
                f"Leave them out: the {self.name} log holds torchrun's and every rank's lines.",
                fields=chosen,
            )
        return options

    @abstractmethod
    def read_logs(self, job_name: str, tail_lines: int | None, options: LogOptions) -> str:
        """logs, once its options were checked against the capabilities."""

    @abstractmethod
    def log_path(self, job_name: str) -> str:
        """Where the log is, as a person would open it (a path, a pod, a file on a node)."""

    @abstractmethod
    def cancel(self, job_name: str, grace_s: float = 30.0) -> JobState:
        """Stop the job (checkpoints stay); a job that ended already is left as it is."""

    @abstractmethod
    def list_jobs(self, page: JobPage = EVERY_JOB) -> Page[JobState]:
        """The page's jobs, newest submission first (then by name: an update never moves
        a job), and how many match past it (None where counting them would mean reading
        every one)."""

    # what some targets do (capabilities) ------------------------------------------------

    def delete(self, job_name: str) -> JobState:
        """Capability.DELETE: remove the job and its pods; returns its last state."""
        self.require(Capability.DELETE)
        raise NotImplementedError(f"{type(self).__name__} declares delete: it must define it")

    def snapshot(self, job_name: str) -> dict[str, Any]:
        """Capability.SNAPSHOT: the job doctor's input ({"job", "pods", "events",
        "logs"} as the API returns them, logs masked)."""
        self.require(Capability.SNAPSHOT)
        raise NotImplementedError(f"{type(self).__name__} declares snapshot: it must define it")

    def retry_facts(self) -> dict[str, Any]:
        """Capability.AUTO_RETRY: what the remedies need beyond the snapshot (free GPUs,
        the newest image); unknown ones are left out."""
        return {}

    def quarantine(
        self, nodes: list[str], reason: str, job_name: str, num_nodes: int
    ) -> Quarantined:
        """Capability.QUARANTINE: take `nodes` (that ran the job's pods) out of service, so
        that no job lands there until released; say whether `num_nodes` are left."""
        self.require(Capability.QUARANTINE)
        raise NotImplementedError(f"{type(self).__name__} declares quarantine: define it")

    def avoiding(self, plan: PlanT, nodes: tuple[str, ...]) -> PlanT:
        """Capability.QUARANTINE: the plan with its pods kept off `nodes` (so the plan
        shows it, and submit applies it)."""
        self.require(Capability.QUARANTINE)
        raise NotImplementedError(f"{type(self).__name__} declares quarantine: define it")
