"""A local job's run directory and its record. Every path a tool reads is derived
from the run directory; the record holds facts (attempt, processes, how it ended),
never paths, so an edited record cannot point a tool at another file."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from skills.shared import processes
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.record_store import RecordCorrupt, RecordFile
from skills.shared.secrets import mask_data
from skills.training_job_deployer.job_spec import JobName
from skills.training_job_deployer.models import JobState

RECORD = "job.json"
# Another deploy of the job waits this long for the lock, then gets conflict.
LOCK_TIMEOUT_S = 15.0


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

    @field_validator("argv")
    @classmethod
    def _masked_argv(cls, argv: list[str]) -> list[str]:
        return mask_data(argv)

    @property
    def ended(self) -> bool:
        return self.ended_at is not None

    def active(self) -> bool:
        """Not ended and its supervisor or its trainer still runs."""
        if self.ended:
            return False
        return any(p is not None and p.alive() for p in (self.supervisor, self.trainer))

    def finished(self, exit_code: int | None, failure: JobFailure | None = None) -> JobRecord:
        """This attempt, ended now. An ended record stays as it is."""
        if self.ended:
            return self
        return self.model_copy(
            update={"ended_at": time.time(), "exit_code": exit_code, "failure": failure}
        )


class RunDir:
    """`<runs_dir>/<job_name>/`: the record, logs, checkpoints and scratch of one job."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.record_file = RecordFile(path / RECORD, JobRecord, lock_timeout_s=LOCK_TIMEOUT_S)

    @property
    def job_name(self) -> str:
        return self.path.name

    def log(self, attempt: int) -> Path:
        return self.path / "logs" / f"attempt-{attempt}.log"

    def next_attempt(self) -> int:
        logs = self.path / "logs"
        return len(list(logs.glob("attempt-*.log"))) + 1 if logs.is_dir() else 1

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

    def read(self) -> JobRecord | None:
        try:
            return self.record_file.read()
        except RecordCorrupt as exc:
            raise corrupt_record(exc) from None

    def require(self) -> JobRecord:
        record = self.read()
        if record is None:
            raise ToolFailure(
                ErrorCode.JOB_NOT_FOUND,
                f"No local job named {self.job_name!r} under {self.path.parent}.",
                "Check the job name and runs_dir, or start it with deploy_training_job.",
            )
        return record


def corrupt_record(exc: RecordCorrupt) -> ToolFailure:
    return ToolFailure(
        ErrorCode.JOB_RECORD_CORRUPT,
        f"The job record {exc.path} cannot be read: {exc.reason}.",
        "Re-deploy with --replace_corrupt_record (MCP: replace_corrupt_record=true) to start "
        "the job over: the record is set aside, checkpoints are kept and resumed from.",
        {"path": str(exc.path)},
    )


def list_recorded_jobs(
    runs_dir: Path, record_name: str, target: str, describe: Callable[[str], JobState]
) -> list[JobState]:
    """Every job with a record named `record_name` under runs_dir, newest first, as
    `describe` tells it; one that cannot be described is listed as unknown, with why."""
    if not runs_dir.is_dir():
        return []
    records = sorted(
        runs_dir.glob(f"*/{record_name}"), key=lambda p: p.stat().st_mtime, reverse=True
    )
    states = []
    for path in records:
        try:
            states.append(describe(path.parent.name))
        except ToolFailure as failure:
            states.append(
                JobState(
                    job_name=path.parent.name,
                    target=target,
                    status="unknown",
                    run_dir=str(path.parent),
                    message=f"{failure.code}: {failure.message}",
                    next_step=failure.hint,
                )
            )
    return states
