"""What this host keeps of a Slurm job: its record (`slurm.json`, the job id and how it
ended, so any process finds the job) in `<runs_dir>/<job_name>/`, whose copy on the
cluster holds the job's files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from skills.training_job_deployer.job_spec import JobName
from skills.training_job_deployer.targets.job_index import figures_row
from skills.training_job_deployer.targets.run_dir import JobOutcome, RecordedRun
from skills.training_job_deployer.targets.slurm.settings import SSH_HOST

SLURM_RECORD = "slurm.json"
# Slurm's job states that are final; every other (PENDING, RUNNING, REQUEUED, ...) is not.
FINAL_STATES = frozenset(
    {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "PREEMPTED",
        "NODE_FAIL",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
    }
)


class SlurmEnd(BaseModel):
    """The scheduler's last word on a job, kept once it is final."""

    model_config = ConfigDict(extra="forbid")

    state: str = Field(pattern=r"^[A-Z_]{1,32}$")
    exit_code: int | None = None
    restarts: int = Field(default=0, ge=0)
    reason: str | None = Field(default=None, max_length=200)


class SlurmRecord(BaseModel):
    """The job this host submitted: facts only (every path is derived from the run dir)."""

    model_config = ConfigDict(extra="forbid")

    job_name: JobName
    slurm_job_id: int = Field(ge=1, lt=2**32)
    ssh_host: str | None = Field(default=None, pattern=SSH_HOST)
    submitted_at: float
    cancel_requested_at: float | None = None
    end: SlurmEnd | None = None
    outcome: JobOutcome | None = None  # set once, at the first look after the end


class SlurmRunDir(RecordedRun[SlurmRecord]):
    """`<runs_dir>/<job_name>/`: on this host the record, on the cluster the job's files."""

    def __init__(self, record_dir: Path, cluster_dir: str) -> None:
        super().__init__(record_dir, SLURM_RECORD, SlurmRecord, "Slurm")
        self.cluster_dir = cluster_dir

    @staticmethod
    def row(record: SlurmRecord) -> dict[str, Any]:
        """An ended job's kept outcome; none before (the scheduler says)."""
        status = None if record.end is None or record.outcome is None else record.outcome.status
        figures = {} if record.outcome is None else record.outcome.figures
        return {"submitted_at": record.submitted_at, "status": status, **figures_row(figures)}

    def log(self, job_id: int | str) -> str:
        return f"{self.cluster_dir}/logs/slurm-{job_id}.log"  # the template's --output
