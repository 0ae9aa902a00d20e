"""The core the local and Slurm targets share: each job has a run directory
`<runs_dir>/<job_name>/` on this host holding its record (read and written under the
job's lock), so any process finds the job. This module owns the record (read/require,
a corrupt one set aside), path resolution and checkpoint ownership, follow (a
`LogFollower` over the growing log), tail, list and cancel's account; a target says
how to poll its job, where its log is and what its state is."""

from __future__ import annotations

import logging
import os
import shutil
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Annotated, Any, ClassVar, Generic, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from skills.operations.record_store import RecordCorrupt, RecordFile
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.log_tail import LastLines, last_lines
from skills.shared.paging import Page
from skills.shared.paths import LocalPath
from skills.shared.progress import Progress
from skills.shared.reading import read_chunk
from skills.shared.secrets import redact
from skills.shared.waiting import poll_until
from skills.training_job_deployer import watchdog
from skills.training_job_deployer.models import JobState, JobStatus
from skills.training_job_deployer.targets import checkpoint_owner
from skills.training_job_deployer.targets.base import (
    EVERY_JOB,
    Capability,
    JobPage,
    LogOptions,
    PlanT,
    Target,
)
from skills.training_job_deployer.targets.job_index import JobIndex, list_recorded_jobs
from skills.training_job_deployer.trainer_log import LogFollower, RunMetrics

CHECKPOINTS = "checkpoints"  # the default checkpoint_dir, inside the run directory
LOG_TAIL_LINES = 40
# A read of a job's log is bounded: a follow step takes at most a chunk, a tail the end.
LOG_CHUNK_BYTES = 8 * 2**20
LOG_TAIL_BYTES = 4 * 2**20
# A log longer than head + tail is read from both ends only: the head has the start and
# the first losses, the tail the last steps, checkpoint and the trainer's summary line.
LOG_HEAD_BYTES = 1 * 2**20
# Another deploy of the job waits this long for the lock, then gets conflict.
LOCK_TIMEOUT_S = 15.0
# Free space below which an ended job's outcome is not added to its record.
KEEP_FREE_BYTES = 1 * 2**20

logger = logging.getLogger(__name__)


def local_path(value: str | None, maybe_name: bool = False) -> str | None:
    """An absolute path for a local path given relative to this process's directory
    (the job runs in its run directory). s3:// URIs stay as they are, and so does a
    value that may be a hub name (`maybe_name`) unless it starts with '.' or '~' or
    exists here."""
    if value is None or value.startswith("s3://"):
        return value
    path = Path(value).expanduser()
    if path.is_absolute():
        return str(path)
    if maybe_name and not (value.startswith((".", "~")) or path.exists()):
        return value
    return str(path.resolve())


def _not_a_uri(value: str | None) -> str | None:
    # None: another target's call (the tools flatten every target's settings).
    if value is not None and "://" in value:
        raise ValueError("runs_dir is a local directory, not a URI")
    return value


# One input for every target that keeps jobs in run directories.
RunsDir = Annotated[
    str,
    Field(
        min_length=1,
        max_length=4096,
        pattern=r"^[^\x00-\x1f\x7f]+$",
        description="The directory holding one run directory per job.",
    ),
    LocalPath(),
    AfterValidator(_not_a_uri),
]


def corrupt_record(exc: RecordCorrupt) -> ToolFailure:
    return ToolFailure(
        ErrorCode.JOB_RECORD_CORRUPT,
        f"The job record {exc.path} cannot be read: {exc.reason}.",
        "Re-deploy with --replace_corrupt_record (MCP: replace_corrupt_record=true) to start "
        "the job over: the record is set aside, checkpoints are kept and resumed from.",
        {"path": str(exc.path)},
    )


def cancelled_message(metrics: RunMetrics) -> str:
    """A cancelled job's account: where a re-run resumes, when a checkpoint was saved."""
    if metrics.checkpoint_step is None:
        return "cancelled"
    return (
        f"cancelled: checkpoint saved at step {metrics.checkpoint_step}; "
        "re-run the same job to resume"
    )


R = TypeVar("R", bound=BaseModel)


class JobOutcome(BaseModel):
    """How an ended job came out, as the first look after its end read it from the log
    (the local supervisor's, at the end): a list reads this, not the log. The trainer's
    figures are JobState's own fields (RunMetrics.state_fields)."""

    model_config = ConfigDict(extra="forbid")

    status: JobStatus
    message: str | None = Field(default=None, max_length=4000)
    figures: dict[str, Any] = Field(default_factory=dict)


def keep_outcome(run: RecordedRun[R], add: Callable[[R | None], R | None]) -> None:
    """An ended job's outcome into its record (`add` says whether, under the lock); a
    record that cannot be written now (a full disk) is left for the next look."""
    try:
        # On a (nearly) full disk the record is left as it is: a write that cannot
        # complete would cost the record itself (an overwrite in place, cut short).
        if shutil.disk_usage(run.path).free < KEEP_FREE_BYTES:
            return
        run.record_file.update(add)
    except (OSError, RecordCorrupt, ToolFailure):
        logger.info("the outcome of %s was not kept", run.path, exc_info=True)


def _note_in_index(record_path: Path, row: Callable[[Any], dict[str, Any]], record: Any) -> None:
    """A record's on_write: its row into the runs' index. A function of the path, not a
    method: a bound method held by the run's own RecordFile made every RecordedRun a
    reference cycle, freed only by the garbage collector (a list of 1,024 running jobs
    held up to ~1 MiB of them at its peak)."""
    job_dir = record_path.parent
    JobIndex(job_dir.parent, record_path.name).note(job_dir.name, record_path, row(record))


class RecordedRun(ABC, Generic[R]):
    """`<runs_dir>/<job_name>/` on this host, with the job's record (`record_name`),
    noted in the runs' index (JobIndex) by whoever writes it, under the job's lock."""

    def __init__(self, path: Path, record_name: str, model: type[R], kind: str) -> None:
        self.path = path
        self.kind = kind  # the job's kind in messages: "local", "Slurm"
        self.record_file = RecordFile(
            path / record_name,
            model,
            lock_timeout_s=LOCK_TIMEOUT_S,
            on_write=partial(_note_in_index, path / record_name, type(self).row),
        )

    @staticmethod
    @abstractmethod
    def row(record: Any) -> dict[str, Any]:
        """What the runs' index keeps of the record: `submitted_at` and the `status` it
        settles (None: the log or the scheduler must say), as JobIndex reads them."""

    def read_row(self) -> dict[str, Any] | None:
        """The index's row of the record as it is now (None: it cannot be read)."""
        try:
            record = self.record_file.read()
        except RecordCorrupt:
            return None
        return None if record is None else self.row(record)

    @property
    def job_name(self) -> str:
        return self.path.name

    def read(self) -> R | None:
        try:
            return self.record_file.read()
        except RecordCorrupt as exc:
            raise corrupt_record(exc) from None

    def require(self) -> R:
        record = self.read()
        if record is None:
            raise ToolFailure(
                ErrorCode.JOB_NOT_FOUND,
                f"No {self.kind} job named {self.job_name!r} under {self.path.parent}.",
                "Check the job name and runs_dir, or start it with deploy_training_job.",
            )
        return record

    def previous(self, replace_corrupt: bool) -> R | None:
        """The record before a submit; an unreadable one is job_record_corrupt, or set
        aside (not deleted: it may be worth a look) when `replace_corrupt`."""
        try:
            return self.record_file.read()
        except RecordCorrupt as exc:
            if not replace_corrupt:
                raise corrupt_record(exc) from None
            aside = exc.path.with_name(f"{exc.path.name}.corrupt-{int(time.time())}")
            os.replace(exc.path, aside)
            return None


class RunDirTarget(Target[PlanT]):
    """A target whose jobs live in run directories under `runs_dir` on this host."""

    record_name: ClassVar[str]
    # The doctor reads the job's log (no pods or events here), and auto-retry resubmits
    # it: a new attempt resumes from the same checkpoint_dir.
    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {Capability.SNAPSHOT, Capability.AUTO_RETRY}
    )
    # Every run-directory target's record file -> its name: a run directory holds one
    # target's job only.
    record_names: ClassVar[dict[str, str]] = {}
    runs_dir: Path

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "record_name" in cls.__dict__:
            RunDirTarget.record_names[cls.record_name] = cls.name

    @abstractmethod
    def _run(self, job_name: str) -> RecordedRun[Any]: ...

    def _open(self, run: RecordedRun[Any]) -> Any:
        """The job's record, for a call about it (a target adds its checks)."""
        return run.require()

    @abstractmethod
    def _log_of(self, run: RecordedRun[Any], record: Any) -> Any:
        """Where the record's log is, as _read_from reads it."""

    @abstractmethod
    def _poll(self, run: RecordedRun[Any]) -> tuple[Any, bool, Any]:
        """(record, done, what else _state needs): the job now. The record first: once
        it says ended, the log holds every line."""

    @abstractmethod
    def _state(
        self, run: RecordedRun[Any], record: Any, polled: Any, metrics: RunMetrics, done: bool
    ) -> JobState: ...

    def check_run_dir_free(self, run: RecordedRun[Any]) -> None:
        """conflict when the run directory holds another target's job of the name."""
        for record, target in self.record_names.items():
            if target != self.name and (run.path / record).exists():
                raise ToolFailure(
                    ErrorCode.CONFLICT,
                    f"{run.path} belongs to a {target} job of the same name.",
                    f"Use another job_name or runs_dir for the {self.name} job.",
                    {"run_dir": str(run.path)},
                )

    @staticmethod
    def check_checkpoint_owner(checkpoint_dir: str, run: RecordedRun[Any], adopt: bool) -> None:
        """A local checkpoint_dir is this job's (or adopted); s3:// is not checked."""
        if not checkpoint_dir.startswith("s3://"):
            checkpoint_owner.check_owner(Path(checkpoint_dir), run.path, adopt)

    @staticmethod
    def claim_checkpoint(checkpoint_dir: str, run: RecordedRun[Any], adopt: bool) -> None:
        if not checkpoint_dir.startswith("s3://"):
            checkpoint_owner.claim(Path(checkpoint_dir), run.path, adopt)

    # submit: one skeleton, the target's steps filled in -----------------------------------

    def submit(self, job_name: str, plan: PlanT, *, replace_corrupt_record: bool = False) -> None:
        """Under the job's lock: the previous record (a corrupt one set aside only when
        asked), a job still active refused as job_running, then the target's start,
        which writes the new record before the lock is let go."""
        self._before_submit(plan)
        run = self._run(job_name)
        run.path.mkdir(parents=True, exist_ok=True)
        with run.record_file.lock():
            previous = run.previous(replace_corrupt_record)
            if previous is not None and (running := self._still_running(run, previous)):
                raise running
            self._start(run, plan, previous)

    def _before_submit(self, plan: PlanT) -> None:
        """Checks that need no lock (what this host or the plan lacks)."""
        del plan

    @abstractmethod
    def _still_running(self, run: RecordedRun[Any], previous: Any) -> ToolFailure | None:
        """The job_running failure when the previous attempt is still active."""

    @abstractmethod
    def _start(self, run: RecordedRun[Any], plan: PlanT, previous: Any) -> None:
        """Start the plan and write its record (the lock is held)."""

    # follow / logs / list ---------------------------------------------------------------

    def follow(
        self, job_name: str, progress: Progress | None = None, wait_seconds: float | None = None
    ) -> JobState:
        """Read the job's events as its log grows, until it ends or `wait_seconds` pass
        (None: until it ends). Progress gets one report per logged step."""
        run = self._run(job_name)
        record = self._open(run)
        follower = LogFollower()
        offset = 0
        log = self._log_of(run, record)

        def look() -> tuple[Any, bool, Any]:
            nonlocal offset
            # The record first: once it says ended, the log holds every line.
            seen = self._poll(run)
            if offset == 0 and (size := self._log_size(log)) > LOG_HEAD_BYTES + LOG_TAIL_BYTES:
                # Never the whole of a long log: its head, then on from its tail.
                follower.feed(self._read_from(log, 0, LOG_HEAD_BYTES))
                follower.skip()
                offset = size - LOG_TAIL_BYTES
            chunk = self._read_from(log, offset)
            offset += len(chunk)
            follower.feed(chunk, progress, final=seen[1])
            return seen

        record, done, polled = poll_until(look, lambda seen: seen[1], wait_seconds, self.poll_s)
        state = self._state(run, record, polled, follower.metrics, done)
        state.findings = watchdog.findings(follower.metrics, state.status == "running", time.time())
        return state

    def read_logs(self, job_name: str, tail_lines: int | None, options: LogOptions) -> str:
        run = self._run(job_name)
        return self._tail(self._log_of(run, self._open(run)), tail_lines)

    def read_log_tail(
        self,
        job_name: str,
        tail_lines: int,
        max_bytes: int,
        before: int | None,
        options: LogOptions,
    ) -> LastLines:
        """Read from the log's end in blocks (through _read_from: a file here or on the
        login node), never the whole; `before` is a byte offset a cut result gave."""
        run = self._run(job_name)
        log = self._log_of(run, self._open(run))
        size = self._log_size(log)
        end = size if before is None else min(before, size)
        found = last_lines(lambda at, n: self._read_from(log, at, n), end, tail_lines, max_bytes)
        # Masked when written; masked again for values only this reader knows.
        found.lines = [redact(line) for line in found.lines]
        return found

    def log_path(self, job_name: str) -> str:
        run = self._run(job_name)
        return self._where(self._log_of(run, run.require()))

    def _where(self, log: Any) -> str:
        """The log's place as a person would open it."""
        return str(log)

    def _tail(self, log: Any, tail_lines: int | None) -> str:
        # The end of the log only: a tail never needs more than the last LOG_TAIL_BYTES.
        data = self._read_from(log, -LOG_TAIL_BYTES)
        lines = data.decode(errors="replace").splitlines()
        if tail_lines is not None:
            lines = lines[-tail_lines:]
        # Masked when written; masked again for values only this reader knows.
        return redact("\n".join(lines))

    def _read_from(self, log: Any, offset: int, max_bytes: int = LOG_CHUNK_BYTES) -> bytes:
        """The log's bytes from `offset` (negative: from the end), b"" while there is
        none; at most `max_bytes` a call, never through a link (the bounded reader)."""
        return read_chunk(log, offset, what="job log", max_bytes=max_bytes)

    def _log_size(self, log: Any) -> int:
        """The log's size in bytes now (0 while there is none)."""
        try:
            return os.lstat(log).st_size
        except OSError:
            return 0

    def snapshot(self, job_name: str) -> dict[str, Any]:
        """Capability.SNAPSHOT: the doctor's input here is the job's log (its last
        LOG_TAIL_BYTES, masked), under the job's name; there are no pods or events."""
        return {"job": None, "pods": [], "events": [], "logs": {job_name: self.logs(job_name)}}

    def retry_facts(self) -> dict[str, Any]:
        """Capability.AUTO_RETRY: nothing beyond the log is known on this host."""
        return {}

    def list_jobs(self, page: JobPage = EVERY_JOB) -> Page[JobState]:
        """The page of jobs with a record under runs_dir, newest first; a record that
        cannot be read is listed with status unknown and why."""
        return list_recorded_jobs(
            self.runs_dir, self.record_name, self.name, self.listed, page, self._run, self._runs_now
        )

    def _runs_now(self, job_name: str, row: dict[str, Any]) -> bool:
        """Whether the index's row of a job its record has not ended names a process of
        the job that runs now (False: the record must say)."""
        del job_name, row
        return False

    def listed(self, job_name: str) -> JobState:
        """The job as a list shows it: by default as describe tells it (a target whose
        record keeps an ended job's outcome answers from the record, reading no log)."""
        return self.describe(job_name)
