"""A local job's run directory and its record. Every path a tool reads is derived
from the run directory; the record holds facts (attempt, processes, how it ended),
never paths, so an edited record cannot point a tool at another file."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from skills.operations import processes
from skills.shared.errors import ErrorCode
from skills.shared.secrets import mask_data
from skills.training_job_deployer.job_spec import JobName
from skills.training_job_deployer.targets.job_index import figures_row
from skills.training_job_deployer.targets.run_dir import JobOutcome, RecordedRun

Identity = processes.Identity
OURS = Identity.OURS
RECORD = "job.json"
SUPERVISOR_MODULE = "skills.training_job_deployer.targets.local.supervisor"
# Set in the trainer's environment (its ranks inherit it): how a later cancel tells the
# job's torchrun from another process at the recorded pid, whatever its argv.
RUN_DIR_ENV = "FSDP_EKS_RUN_DIR"


class ProcessIdentity(BaseModel):
    """A process we may signal: its pid and start time (a pid alone can be recycled)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pid: int = Field(gt=1, lt=2**22)
    started: float

    @classmethod
    def of(cls, pid: int) -> ProcessIdentity | None:
        started = processes.start_time(pid)
        return None if started is None else cls(pid=pid, started=started)

    def alive(self) -> bool:
        return processes.is_alive(self.pid, self.started)


class JobFailure(BaseModel):
    """Why a job ended, when the supervisor knows better than the trainer's log."""

    model_config = ConfigDict(extra="forbid")

    code: ErrorCode
    message: str = Field(max_length=2000)


class JobProgress(BaseModel):
    """What the trainer's log said so far (RunMetrics.state_fields), as the supervisor
    last wrote it (`at`): a list of running jobs reads this, not the log."""

    model_config = ConfigDict(extra="forbid")

    at: float
    figures: dict[str, Any] = Field(default_factory=dict)


class JobRecord(BaseModel):
    """One attempt of a job. Written by submit, the job's supervisor and cancel, each
    read-modify-write under the job's lock; once `ended_at` is set it is final."""

    model_config = ConfigDict(extra="forbid")

    job_name: JobName
    attempt: int = Field(ge=1, le=100_000)
    # Secrets masked as in logs: the supervisor runs the plan it was handed, never this.
    argv: list[str] = Field(description="What the supervisor runs, for people to read.")
    submitted_at: float
    supervisor: ProcessIdentity | None = None
    trainer: ProcessIdentity | None = None  # torchrun, leader of the ranks' process group
    cancel_requested_at: float | None = None
    cancel_grace_s: float = Field(default=30.0, ge=0, le=3600)
    ended_at: float | None = None
    exit_code: int | None = None
    failure: JobFailure | None = None
    # The last lines the supervisor could not write to the log (a full disk).
    unlogged_tail: list[str] = Field(default_factory=list, max_length=40)
    outcome: JobOutcome | None = None  # set once, after the end: what a list shows
    # Kept current by the supervisor while the job runs (every PROGRESS_EVERY_S at most).
    progress: JobProgress | None = None

    @field_validator("argv")
    @classmethod
    def _masked_argv(cls, argv: list[str]) -> list[str]:
        return mask_data(argv)

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    def identified(self, run: RunDir) -> Iterator[tuple[str, ProcessIdentity, Identity]]:
        """Each process the record names (role, identity), and what is at its pid now;
        lazily: a caller that has its answer looks no further."""
        for role, identity, expected in (
            ("supervisor", self.supervisor, run.supervisor_process),
            ("trainer", self.trainer, run.trainer_process),
        ):
            if identity is not None:
                yield role, identity, processes.identify(identity.pid, identity.started, expected)

    def active(self, run: RunDir) -> bool:
        """Not ended and its supervisor or its trainer still runs (that very process, and
        it is this job's: a process the record names wrongly does not keep it running)."""
        return not self.ended and any(found is OURS for *_, found in self.identified(run))

    def gone(self, run: RunDir) -> bool:
        """Every process the record names is gone: none is this job's, nor a live process
        another's (a record naming one was edited: cancel says so, nothing settles it)."""
        return all(found is Identity.GONE for *_, found in self.identified(run))

    def finished(self, exit_code: int | None, failure: JobFailure | None = None) -> JobRecord:
        """This attempt, ended now. An ended record stays as it is."""
        if self.ended:
            return self
        return self.model_copy(
            update={"ended_at": time.time(), "exit_code": exit_code, "failure": failure}
        )


class RunDir(RecordedRun[JobRecord]):
    """`<runs_dir>/<job_name>/`: the record, logs, checkpoints and scratch of one job."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, RECORD, JobRecord, "local")

    @staticmethod
    def row(record: JobRecord) -> dict[str, Any]:
        """An ended job's kept outcome; `running` while the record says it has not
        ended (JobIndex.UNSETTLED: failed or cancelled once its processes are gone),
        with the processes that keep it running and the figures its supervisor keeps."""
        if record.ended:
            status = None if record.outcome is None else record.outcome.status
            figures = {} if record.outcome is None else record.outcome.figures
        else:
            status = "running"
            figures = {} if record.progress is None else record.progress.figures
        row: dict[str, Any] = {
            "submitted_at": record.submitted_at,
            "status": status,
            "ended_at": record.ended_at,
            **figures_row(figures),
        }
        for role, identity in (("supervisor", record.supervisor), ("trainer", record.trainer)):
            if identity is not None:
                row[f"{role}_pid"], row[f"{role}_started"] = identity.pid, identity.started
        return row

    def log(self, attempt: int) -> Path:
        return self.path / "logs" / f"attempt-{attempt}.log"

    def next_attempt(self) -> int:
        logs = self.path / "logs"
        return len(list(logs.glob("attempt-*.log"))) + 1 if logs.is_dir() else 1

    @property
    def supervisor_process(self) -> processes.Expected:
        """This job's supervisor, as its command line names it (not as the record says)."""
        return supervisor_process(str(self.path))

    @property
    def trainer_process(self) -> processes.Expected:
        return trainer_process(str(self.path))

    @property
    def supervisor_log(self) -> Path:
        return self.path / "supervisor.log"

    @property
    def scratch(self) -> Path:
        """TMPDIR for the job, so nothing it makes is left in /tmp; removed at its end."""
        return self.path / "tmp"

    @property
    def torchelastic(self) -> Path:
        """torchrun's --log-dir: its per-rank error files stay with the job."""
        return self.path / "torchelastic"


def supervisor_process(run_path: str) -> processes.Expected:
    return processes.module_command(SUPERVISOR_MODULE, run_path)


def trainer_process(run_path: str) -> processes.Expected:
    return processes.Expected(environment={RUN_DIR_ENV: run_path})


def row_runs_now(run_path: str, row: dict[str, Any]) -> bool:
    """The index row's supervisor or trainer runs, and is the job's at `run_path` (as
    JobRecord.active asks of the record)."""
    return any(
        processes.identify(row.get(f"{role}_pid"), row.get(f"{role}_started"), expected) is OURS
        for role, expected in (
            ("supervisor", supervisor_process(run_path)),
            ("trainer", trainer_process(run_path)),
        )
    )
