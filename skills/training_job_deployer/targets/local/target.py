"""The local target: torchrun on this host. plan -> submit -> describe -> logs -> cancel.

Each job lives in `<runs_dir>/<job_name>/` (record.RunDir): `job.json`, its
record; `logs/attempt-N.log`, torchrun's output with secrets masked; the trainer's
output and, unless checkpoint_dir says otherwise, `checkpoints/`, so a re-run of the
job resumes from its newest complete checkpoint. A detached supervisor per attempt
(supervisor.py) runs torchrun and records how it ended, so an agent's call can return
while it trains and a later call, from any process, can follow, describe or cancel it.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError

from skills.operations import processes
from skills.operations.record_store import RecordCorrupt
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.paths import path_fields
from skills.shared.secrets import redact
from skills.shared.waiting import poll_until
from skills.training_job_deployer.job_spec import (
    JobSpec,
    hub_cache,
    hub_lines,
    launcher,
    token_source,
    trainer_argv,
)
from skills.training_job_deployer.memory_estimate import GIB, node_runtime
from skills.training_job_deployer.models import JobState
from skills.training_job_deployer.targets.base import Plan, TargetSettings
from skills.training_job_deployer.targets.local.record import (
    RECORD,
    SUPERVISOR_MODULE,
    JobFailure,
    JobRecord,
    ProcessIdentity,
    RunDir,
    row_runs_now,
)
from skills.training_job_deployer.targets.run_dir import (
    CHECKPOINTS,
    LOG_TAIL_LINES,
    JobOutcome,
    RunDirTarget,
    RunsDir,
    cancelled_message,
    corrupt_record,
    keep_outcome,
    local_path,
)
from skills.training_job_deployer.trainer_log import (
    EXIT_PREEMPTED,
    RunMetrics,
    tail_with_error,
)
from trainer.node_memory import shm_free_bytes
from trainer.threads import choose_num_threads

logger = logging.getLogger(__name__)

POLL_S = 0.25


def visible_gpus(nvidia_smi_listing: str | None, cuda_visible_devices: str | None) -> int:
    """GPUs a job on this host can use: those `nvidia-smi -L` lists (None: no NVIDIA
    driver, so the job runs on CPU), narrowed by CUDA_VISIBLE_DEVICES when it is set."""
    if nvidia_smi_listing is None:
        return 0
    listed = sum(1 for line in nvidia_smi_listing.splitlines() if line.startswith("GPU "))
    if cuda_visible_devices is None:
        return listed
    chosen = [d for d in cuda_visible_devices.split(",") if d.strip() not in ("", "-1")]
    return min(listed, len(chosen))


def check_gpu_fit(gpu_per_node: int, gpus: int, cpus: int | None = None) -> None:
    """One process per GPU: asking for more processes than GPUs would crash rank N. On
    a host without GPUs each process is a CPU worker: at most one per CPU."""
    if gpus and gpu_per_node > gpus:
        raise ToolFailure(
            ErrorCode.NOT_ENOUGH_GPUS,
            f"gpu_per_node={gpu_per_node} but this host has {gpus} usable GPU(s).",
            f"Use gpu_per_node={gpus} or fewer (CUDA_VISIBLE_DEVICES limits which are used).",
            {"gpus": gpus},
        )
    if not gpus and cpus is not None and gpu_per_node > cpus:
        raise ToolFailure(
            ErrorCode.NOT_ENOUGH_GPUS,
            f"gpu_per_node={gpu_per_node} but this host has no GPU and {cpus} CPU(s): "
            "each process would be a CPU worker.",
            f"Use gpu_per_node={min(cpus, 2)} (at most {cpus}) here, or a GPU host.",
            {"gpus": 0, "cpus": cpus},
        )


def check_can_create(path: Path) -> None:
    """The nearest existing part of `path` is a directory this process may write in,
    so a plan does not promise a run directory that cannot be made."""
    existing = path
    while not existing.exists():  # ENAMETOOLONG raises: a typed error upstream
        existing = existing.parent
    if not existing.is_dir():
        raise ToolFailure(
            ErrorCode.NOT_A_DIRECTORY,
            f"{existing} is not a directory, so {path} cannot be made.",
            "Pick another runs_dir or job_name, or move that file away.",
            {"path": str(existing)},
        )
    if not os.access(existing, os.W_OK):
        raise ToolFailure(
            ErrorCode.PERMISSION_DENIED,
            f"This user may not create files in {existing}.",
            "Pick a runs_dir you can write to (the default is ./runs).",
            {"path": str(existing)},
        )


def _nvidia_smi_listing() -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        done = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


class LocalSettings(TargetSettings):
    """runs torchrun here"""

    target: Literal["local"] = "local"
    runs_dir: RunsDir = "runs"


class LocalPlan(Plan):
    """Exactly what submit runs: argv (never a shell string), added environment, directory."""

    target: Literal["local"] = "local"
    argv: list[str]
    env: dict[str, str] = Field(description="Variables added to this host's environment.")
    cwd: str
    run_dir: str
    attempt: int = Field(ge=1)
    log_path: str
    nproc_per_node: int
    checkpoint_dir: str = Field(description="Where checkpoints go (local path or s3://).")
    adopt_checkpoint_dir: bool = False
    hub: list[str] = Field(default_factory=list, description="Hub ids fetched, and where.")

    def to_display(self) -> list[tuple[str, Any]]:
        return [
            ("argv", " ".join(self.argv)),
            ("env", " ".join(f"{k}={v}" for k, v in self.env.items())),
            ("run dir", self.run_dir),
            *[("hub", line) for line in self.hub],
        ]


class LocalTarget(RunDirTarget[LocalPlan]):
    name: ClassVar[str] = "local"
    settings_model: ClassVar[type[TargetSettings]] = LocalSettings
    plan_model: ClassVar[type[Plan]] = LocalPlan
    on_cluster: ClassVar[bool] = False
    record_name: ClassVar[str] = RECORD
    poll_s: ClassVar[float] = POLL_S

    def __init__(self, settings: LocalSettings | str | Path = "runs") -> None:
        if not isinstance(settings, LocalSettings):
            settings = LocalSettings(runs_dir=str(settings))
        self.settings = settings
        self.runs_dir = Path(settings.runs_dir).expanduser().resolve()

    def run_dir(self, job_name: str) -> Path:
        return self.runs_dir / job_name

    def _run(self, job_name: str) -> RunDir:
        return RunDir(self.run_dir(job_name))

    def _runs_now(self, job_name: str, row: dict[str, Any]) -> bool:
        # os.path.join, as str(run_dir(job_name)) spells it: a filter looks at every
        # running job's row, and a Path per row costs more than the check.
        return row_runs_now(os.path.join(self.runs_dir, job_name), row)

    def host_gpus(self) -> int:
        return visible_gpus(_nvidia_smi_listing(), os.environ.get("CUDA_VISIBLE_DEVICES"))

    # plan ------------------------------------------------------------------

    def plan(self, spec: JobSpec) -> LocalPlan:
        if spec.num_nodes != 1:
            raise ToolFailure(
                ErrorCode.UNSUPPORTED_FOR_TARGET,
                f"The local target runs on one node; num_nodes={spec.num_nodes} was asked for.",
                "Use num_nodes=1 locally (gpu_per_node sets the process count), or a cluster "
                "target for several nodes.",
            )
        gpus = self.host_gpus()
        check_gpu_fit(spec.gpu_per_node, gpus, os.cpu_count())
        if spec.torchrun_path and shutil.which(spec.torchrun_path) is None:
            raise ToolFailure(
                ErrorCode.INVALID_INPUT,
                f"torchrun_path {spec.torchrun_path!r} is no executable on this host.",
                "Give the absolute path of a torchrun here (e.g. .venv/bin/torchrun made "
                "absolute), or leave torchrun_path out to use this Python's torch.",
                {"problems": [{"field": "torchrun_path", "problem": "not found"}]},
            )
        run = self._run(spec.job_name)
        check_can_create(run.path)
        self.check_run_dir_free(run)
        attempt = run.next_attempt()
        # Checkpoints default to the run directory, so re-running the same job resumes
        # from its newest complete checkpoint instead of starting over.
        paths = {
            name: local_path(getattr(spec, name), maybe_name=marker.hub_name)
            for name, marker in path_fields(type(spec)).items()
        }
        paths["checkpoint_dir"] = paths["checkpoint_dir"] or str(run.path / CHECKPOINTS)
        self.check_checkpoint_owner(paths["checkpoint_dir"], run, spec.adopt_checkpoint_dir)
        spec = spec.model_copy(update=paths)
        argv = [
            # Safe-path mode: torchrun here imports these tools' torch, never the project's.
            *launcher(spec, sys.executable, processes.SAFE_PATH_FLAGS),
            "--standalone",
            "--nnodes=1",
            f"--nproc_per_node={spec.gpu_per_node}",
            f"--max-restarts={spec.max_restarts}",
            f"--log-dir={run.torchelastic}",
            "-m",
            "trainer",
            *trainer_argv(spec),
            "--output_dir",
            str(run.path),
        ]
        # The job runs in its run directory: put this project (checkout or install) on
        # the path so `-m trainer` imports the trainer that belongs to these tools.
        env = {
            # Whole lines reach the log as they are printed, so progress streams.
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": str(
                choose_num_threads(
                    os.cpu_count() or 1, spec.gpu_per_node, os.environ.get("OMP_NUM_THREADS")
                )
            ),
            **processes.suite_env(),
            # torchelastic and the ranks make temp files: they stay in the run dir.
            "TMPDIR": str(run.scratch),
            **spec.env,  # the job's own variables (NCCL_DEBUG=INFO) last
        }
        runtime = node_runtime(spec, gpus > 0, round(shm_free_bytes() / GIB, 1))
        return LocalPlan(
            argv=argv,
            env=env,
            cwd=str(run.path),
            run_dir=str(run.path),
            attempt=attempt,
            log_path=str(run.log(attempt)),
            nproc_per_node=spec.gpu_per_node,
            checkpoint_dir=paths["checkpoint_dir"],
            adopt_checkpoint_dir=spec.adopt_checkpoint_dir,
            async_save=runtime.async_save,
            process_group=runtime.process_group,
            hub=hub_lines(spec, hub_cache(os.environ), token_source(os.environ)),
        )

    # submit ----------------------------------------------------------------

    def _before_submit(self, plan: LocalPlan) -> None:
        if plan.argv[0] == sys.executable and importlib.util.find_spec("torch") is None:
            raise ToolFailure(
                ErrorCode.TRAINER_NOT_INSTALLED,
                "PyTorch is not installed in this Python environment, so torchrun cannot start.",
                "Install the trainer extra: uv tool install 'fsdp-eks[trainer] @ <checkout>' "
                "(the suite as a tool), or `make setup` in a checkout.",
                {"python": sys.executable},
            )

    def _still_running(  # type: ignore[override]
        self, run: RunDir, previous: JobRecord
    ) -> ToolFailure | None:
        if not previous.active(run):
            return None
        return ToolFailure(
            ErrorCode.JOB_RUNNING,
            f"Job {run.job_name!r} is already running (attempt {previous.attempt}).",
            "Follow it with get_training_job, stop it with cancel_training_job, or "
            "deploy under another job_name.",
            {"run_dir": str(run.path)},
        )

    def _start(  # type: ignore[override]
        self, run: RunDir, plan: LocalPlan, previous: JobRecord | None
    ) -> None:
        """Start the plan's attempt: one writer per job (the lock is held)."""
        if run.log(plan.attempt).exists() or (previous and previous.attempt >= plan.attempt):
            raise ToolFailure(
                ErrorCode.CONFLICT,
                f"Attempt {plan.attempt} of job {run.job_name!r} was started meanwhile by "
                "another call.",
                "Look at it with get_training_job, then deploy again if needed.",
            )
        self.claim_checkpoint(plan.checkpoint_dir, run, plan.adopt_checkpoint_dir)
        run.log(plan.attempt).parent.mkdir(parents=True, exist_ok=True)
        record = JobRecord(
            job_name=run.job_name, attempt=plan.attempt, argv=plan.argv, submitted_at=time.time()
        )
        run.record_file.write(record)
        supervisor = processes.spawn_module(
            SUPERVISOR_MODULE,
            str(run.path),
            log=run.supervisor_log,
            stdin=plan.model_dump_json().encode(),  # the plan, exactly: never re-read
        )
        run.record_file.write(
            record.model_copy(update={"supervisor": ProcessIdentity.of(supervisor)})
        )

    # follow (run_dir.RunDirTarget) ------------------------------------------

    def _log_of(self, run: RunDir, record: JobRecord) -> Path:  # type: ignore[override]
        return run.log(record.attempt)

    def _poll(self, run: RunDir) -> tuple[JobRecord, bool, None]:  # type: ignore[override]
        record = run.require()
        if record.ended or record.active(run):
            return record, record.ended, None
        # Its processes are gone. The supervisor records the end and then exits, so it
        # may have done both since the read above: the record read now is the last word
        # (a read before the end was written made a job that succeeded "failed: the
        # supervisor stopped without recording", seen under load).
        return run.require(), True, None

    def _state(  # type: ignore[override]
        self, run: RunDir, record: JobRecord, polled: None, metrics: RunMetrics, done: bool
    ) -> JobState:
        job_name = run.job_name
        exit_code = record.exit_code
        message = metrics.outcome(exit_code) if done else None
        if not done:
            status = "running"
        elif record.cancel_requested_at is not None:  # cancelled wins
            status, message = "cancelled", cancelled_message(metrics)
        elif record.failure is not None:
            status, message = "failed", record.failure.message
        elif not record.ended:
            status = "failed"
            message = (
                "failed: the job's supervisor stopped without recording how the job ended "
                f"(killed?); see the log and {run.supervisor_log}"
            )
        elif metrics.preempted is not None or exit_code == EXIT_PREEMPTED:
            status = "preempted"
        elif message is None:
            status = "succeeded"
        else:
            status = "failed"
        state = JobState(
            job_name=job_name,
            target=self.name,
            status=status,
            **metrics.state_fields(),
            run_dir=str(run.path),
            log_path=str(run.log(record.attempt)),
            exit_code=exit_code,
            message=None if message is None else redact(message),
        )
        if status == "failed":
            tail = self._tail(run.log(record.attempt), LOG_TAIL_LINES)
            state.log_tail = tail_with_error(
                "\n".join([*tail.splitlines(), *record.unlogged_tail][-LOG_TAIL_LINES:]),
                state.error,
            )
        if done and record.outcome is None:
            fields = metrics.state_fields()
            outcome = JobOutcome(status=status, message=state.message, figures=fields)
            died = JobFailure(code=ErrorCode.JOB_FAILED, message=state.message or status)
            keep(run, record, outcome, None if record.ended else died)
        state.suggest_next_step(self.call_args())
        return state

    def listed(self, job_name: str) -> JobState:
        """From the record, reading no log: an ended job by its outcome, a running one
        (its processes alive) by the figures its supervisor keeps there. Any other (a
        record from before those were kept, a job whose processes are gone unrecorded)
        as describe tells it."""
        run = self._run(job_name)
        record = self._open(run)
        if record.ended and record.outcome is not None:
            outcome = record.outcome
            status, figures, message = outcome.status, outcome.figures, outcome.message
        elif not record.ended and record.progress is not None and record.active(run):
            status, figures, message = "running", record.progress.figures, None
        else:
            return self.describe(job_name)
        try:
            state = JobState(
                job_name=job_name,
                target=self.name,
                status=status,
                **{k: v for k, v in figures.items() if k in JobState.model_fields},
                run_dir=str(run.path),
                log_path=str(run.log(record.attempt)),
                exit_code=record.exit_code,
                message=message,
            )
        except ValidationError:  # figures an edit made wrong: the log says
            return self.describe(job_name)
        state.suggest_next_step(self.call_args())
        return state

    # cancel ----------------------------------------------------------------

    def cancel(self, job_name: str, grace_s: float = 30.0) -> JobState:
        """Ask the job's supervisor to stop it: SIGTERM to every rank (they checkpoint),
        SIGKILL after `grace_s`. Returns once the record says the job ended. A job that
        ended already is left as it is."""
        run = self._run(job_name)

        def request(record: JobRecord | None) -> JobRecord | None:
            if record is None:
                run.require()  # raises job_not_found
            if record is None or record.ended or record.cancel_requested_at is not None:
                return None
            _refuse_foreign(run, record)
            return record.model_copy(
                update={"cancel_requested_at": time.time(), "cancel_grace_s": grace_s}
            )

        try:
            record = run.record_file.update(request)
        except RecordCorrupt as exc:
            raise corrupt_record(exc) from None
        assert record is not None
        if not record.ended:
            _refuse_foreign(run, record)  # a cancel asked for before the record was edited
            self._stop(run, record, grace_s)
        return self.describe(job_name)

    def _stop(self, run: RunDir, record: JobRecord, grace_s: float) -> None:
        supervisor = record.supervisor
        if supervisor is not None:
            processes.signal_group(
                supervisor.pid, supervisor.started, signal.SIGTERM, run.supervisor_process
            )
        # Without a supervisor to stop it and record it, do both here.
        record = poll_until(
            run.require,
            lambda record: record.ended or supervisor is None or not supervisor.alive(),
            grace_s + 10,
            POLL_S,
        )
        if record.ended:
            return
        trainer = record.trainer
        if trainer is not None:
            processes.stop_group(
                trainer.pid, trainer.started, run.trainer_process, grace_s, interval_s=POLL_S
            )
        # The ranks (each in a session of its own under torchrun) go too.
        processes.signal_marked(signal.SIGKILL, run.trainer_process)
        run.record_file.update(lambda r: None if r is None or r.ended else r.finished(None))


def _refuse_foreign(run: RunDir, record: JobRecord) -> None:
    """A record naming a live process that is not this job's supervisor or trainer was
    edited (or is stale): nothing is signalled, and the caller is told."""
    for role, identity, found in record.identified(run):
        if found is processes.Identity.FOREIGN:
            raise ToolFailure(
                ErrorCode.JOB_RECORD_CORRUPT,
                f"The record {run.record_file.path} names process {identity.pid} as the "
                f"job's {role}, but that process is not this job's {role}; nothing was "
                "signalled.",
                "The record was edited or is stale: look at the process yourself, then "
                "deploy again with --replace_corrupt_record if the job is not running.",
                {"pid": identity.pid, "role": role, "reason": "not_our_process"},
            )


def keep(
    run: RunDir, seen: JobRecord, outcome: JobOutcome, unrecorded: JobFailure | None = None
) -> None:
    """The ended attempt's outcome into its record, once (a later attempt's is its own);
    a record that cannot be written now (a full disk) is left for the next look. An
    attempt whose supervisor died without recording its end (every process it names
    gone, looked at again under the lock) is ended here, with `unrecorded` as its failure: nobody
    else will, and a list would read its log again on every look."""

    def add(record: JobRecord | None) -> JobRecord | None:
        if record is None or record.attempt != seen.attempt or record.outcome:
            return None
        if not record.ended:
            # No supervisor yet: submit is still starting it (it holds this lock then).
            if unrecorded is None or record.supervisor is None or not record.gone(run):
                return None
            failure = None if record.cancel_requested_at is not None else unrecorded
            record = record.finished(None, failure)
        return record.model_copy(update={"outcome": outcome})

    keep_outcome(run, add)
