"""The local target: torchrun on this host. plan -> submit -> describe -> logs -> cancel.

Each job lives in `<runs_dir>/<job_name>/`: `job.json` (pid, argv, log path, exit
code), `logs/attempt-N.log` (torchrun's stdout+stderr), the trainer's output and,
unless checkpoint_dir says otherwise, `checkpoints/`: a re-run of the job resumes
from its newest complete checkpoint.
The job runs in its own process session, so an agent's call can return while it
trains and a later call (or another process) can follow, describe or cancel it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.paths import LocalPath, path_fields
from skills.shared.progress import Progress
from skills.shared.secrets import redact
from skills.training_job_deployer.job_spec import JobSpec, trainer_argv
from skills.training_job_deployer.models import JobState
from skills.training_job_deployer.target import Plan, TargetSettings
from skills.training_job_deployer.trainer_log import EXIT_PREEMPTED, RunMetrics, parse_events

RECORD = "job.json"
CHECKPOINTS = "checkpoints"  # the default checkpoint_dir, inside the run directory
POLL_S = 0.25
LOG_TAIL_LINES = 40

# Processes started by this Python process, so their exit codes can be collected.
_children: dict[Path, subprocess.Popen[bytes]] = {}  # by run directory


def _pid_running(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped."""
    if Path("/proc/self/stat").exists():
        try:
            # The state letter follows the parenthesised command name.
            stat = Path(f"/proc/{pid}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            return False
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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


def _threads_per_process(nproc: int) -> int:
    return max(1, (os.cpu_count() or 1) // nproc)


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


def check_gpu_fit(gpu_per_node: int, gpus: int) -> None:
    """One process per GPU: asking for more processes than GPUs would crash rank N."""
    if gpus and gpu_per_node > gpus:
        raise ToolFailure(
            ErrorCode.NOT_ENOUGH_GPUS,
            f"gpu_per_node={gpu_per_node} but this host has {gpus} usable GPU(s).",
            f"Use gpu_per_node={gpus} or fewer (CUDA_VISIBLE_DEVICES limits which are used).",
            {"gpus": gpus},
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
    """launches torchrun on this host"""

    target: Literal["local"] = "local"
    runs_dir: Annotated[
        str,
        Field(description="Local target: the directory holding one run directory per job."),
        LocalPath(),
    ] = "runs"


class LocalPlan(Plan):
    """Exactly what submit runs: argv (never a shell string), added environment, directory."""

    target: Literal["local"] = "local"
    argv: list[str]
    env: dict[str, str] = Field(description="Variables added to this host's environment.")
    cwd: str
    run_dir: str
    log_path: str
    nproc_per_node: int

    def to_display(self) -> list[tuple[str, Any]]:
        return [
            ("argv", " ".join(self.argv)),
            ("env", " ".join(f"{k}={v}" for k, v in self.env.items())),
            ("run dir", self.run_dir),
        ]


class LocalTarget:
    name: ClassVar[str] = "local"
    settings_model: ClassVar[type[TargetSettings]] = LocalSettings
    plan_model: ClassVar[type[Plan]] = LocalPlan

    def __init__(self, settings: LocalSettings | str | Path = "runs") -> None:
        if not isinstance(settings, LocalSettings):
            settings = LocalSettings(runs_dir=str(settings))
        self.runs_dir = Path(settings.runs_dir).resolve()

    def run_dir(self, job_name: str) -> Path:
        return self.runs_dir / job_name

    # plan ------------------------------------------------------------------

    def plan(self, spec: JobSpec) -> LocalPlan:
        if spec.num_nodes != 1:
            raise ToolFailure(
                ErrorCode.UNSUPPORTED_FOR_TARGET,
                f"The local target runs on one node; num_nodes={spec.num_nodes} was asked for.",
                "Use num_nodes=1 locally (gpu_per_node sets the process count), or a cluster "
                "target for several nodes.",
            )
        check_gpu_fit(
            spec.gpu_per_node,
            visible_gpus(_nvidia_smi_listing(), os.environ.get("CUDA_VISIBLE_DEVICES")),
        )
        run_dir = self.run_dir(spec.job_name)
        attempt = self._next_attempt(run_dir)
        log_path = run_dir / "logs" / f"attempt-{attempt}.log"
        # Checkpoints default to the run directory, so re-running the same job resumes
        # from its newest complete checkpoint instead of starting over.
        paths = {
            name: local_path(getattr(spec, name), maybe_name=marker.hub_name)
            for name, marker in path_fields(type(spec)).items()
        }
        paths["checkpoint_dir"] = paths["checkpoint_dir"] or str(run_dir / CHECKPOINTS)
        spec = spec.model_copy(update=paths)
        argv = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nnodes=1",
            f"--nproc_per_node={spec.gpu_per_node}",
            f"--max-restarts={spec.max_restarts}",
            "-m",
            "trainer",
            *trainer_argv(spec),
            "--output_dir",
            str(run_dir),
        ]
        # The job runs in its run directory: put this project (checkout or install) on
        # the path so `-m trainer` imports the trainer that belongs to these tools.
        project_root = str(Path(__file__).resolve().parents[2])
        env = {
            # Whole lines reach the log as they are printed, so progress streams.
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": str(_threads_per_process(spec.gpu_per_node)),
            "PYTHONPATH": os.pathsep.join(
                p for p in (project_root, os.environ.get("PYTHONPATH", "")) if p
            ),
        }
        return LocalPlan(
            argv=argv,
            env=env,
            cwd=str(run_dir),
            run_dir=str(run_dir),
            log_path=str(log_path),
            nproc_per_node=spec.gpu_per_node,
        )

    @staticmethod
    def _next_attempt(run_dir: Path) -> int:
        logs = run_dir / "logs"
        existing = [p for p in logs.glob("attempt-*.log")] if logs.is_dir() else []
        return len(existing) + 1

    # submit ----------------------------------------------------------------

    def submit(self, job_name: str, plan: LocalPlan) -> None:  # type: ignore[override]
        record = self._read_record(job_name)
        if record and self._alive(job_name, record):
            raise ToolFailure(
                ErrorCode.JOB_RUNNING,
                f"Job {job_name!r} is already running (pid {record['pid']}).",
                "Follow it with get_training_job, cancel it first, or pick another job_name.",
                {"run_dir": plan.run_dir},
            )
        if importlib.util.find_spec("torch") is None:
            raise ToolFailure(
                ErrorCode.TRAINER_NOT_INSTALLED,
                "PyTorch is not installed in this Python environment, so torchrun cannot start.",
                "Install the trainer extra: pip install 'torch==2.13.0' -e '.[trainer]' "
                "(or run `make setup`).",
                {"python": sys.executable},
            )
        log_path = Path(plan.log_path)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **plan.env}
        with open(log_path, "wb") as log:
            try:
                proc = subprocess.Popen(
                    plan.argv,
                    cwd=plan.cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                raise ToolFailure(
                    ErrorCode.LAUNCH_FAILED,
                    f"Could not start torchrun: {exc.strerror}.",
                    "Install the trainer extra (pip install 'fsdp-eks[trainer]').",
                ) from exc
        _children[self.run_dir(job_name)] = proc
        self._write_record(
            job_name,
            {
                "job_name": job_name,
                "pid": proc.pid,
                "argv": plan.argv,
                "log_path": plan.log_path,
                "started_at": time.time(),
                "exit_code": None,
                "cancelled": False,
            },
        )

    # describe / follow -----------------------------------------------------

    def describe(self, job_name: str) -> JobState:
        return self.follow(job_name, wait_seconds=0)

    def follow(
        self, job_name: str, progress: Progress | None = None, wait_seconds: float | None = None
    ) -> JobState:
        """Read the job's events as they come, until it ends or `wait_seconds` pass
        (None: until it ends). Progress gets one report per logged step."""
        record = self._require_record(job_name)
        deadline = None if wait_seconds is None else time.monotonic() + wait_seconds
        metrics = RunMetrics()
        pending = b""
        offset = 0
        log_path = Path(record["log_path"])
        while True:
            done = not self._alive(job_name, record)
            chunk = self._read_from(log_path, offset)
            offset += len(chunk)
            pending += chunk
            complete, _, pending = pending.rpartition(b"\n")
            if done and pending:  # the last line may lack its newline
                complete, pending = complete + b"\n" + pending, b""
            for event in parse_events(complete.decode("utf-8", errors="replace")):
                metrics.add(event)
                if progress is not None and event["event"] in ("start", "step"):
                    progress.report(metrics.steps, metrics.max_steps, metrics.progress_message())
            if done or (deadline is not None and time.monotonic() >= deadline):
                break
            time.sleep(POLL_S)
        return self._state(job_name, record, metrics, done)

    def _state(
        self, job_name: str, record: dict[str, Any], metrics: RunMetrics, done: bool
    ) -> JobState:
        record = self._read_record(job_name) or record
        exit_code = record.get("exit_code")
        message = metrics.outcome(exit_code) if done else None
        if not done:
            status = "running"
        elif record.get("cancelled"):
            status = "cancelled"
            message = "cancelled"
            if metrics.checkpoint_step is not None:
                message += (
                    f": checkpoint saved at step {metrics.checkpoint_step}; "
                    "re-run the same job to resume"
                )
        elif metrics.preempted is not None or exit_code == EXIT_PREEMPTED:
            status = "preempted"
        elif message is None:
            status = "succeeded"
        else:
            status = "failed"
        elapsed = (metrics.summary or {}).get("elapsed_s")
        if elapsed is None and metrics.last_event:
            elapsed = metrics.last_event.get("elapsed_s")
        state = JobState(
            job_name=job_name,
            target=self.name,
            status=status,
            steps=metrics.steps,
            max_steps=metrics.max_steps,
            first_loss=metrics.first_loss,
            last_loss=metrics.last_loss,
            tokens_per_s=metrics.tokens_per_s,
            world_size=metrics.world_size,
            last_eval_loss=metrics.last_eval_loss,
            resumed_from=metrics.resumed_from,
            checkpoint_step=metrics.checkpoint_step,
            checkpoint_path=metrics.checkpoint_path,
            run_dir=str(self.run_dir(job_name)),
            log_path=record["log_path"],
            exit_code=exit_code,
            elapsed_s=elapsed,
            error=None
            if metrics.error is None
            else {k: redact(v) if isinstance(v, str) else v for k, v in metrics.error.items()},
            message=None if message is None else redact(message),
        )
        if status == "failed":
            state.log_tail = self.logs(job_name, LOG_TAIL_LINES)
        elif status in ("preempted", "cancelled") and metrics.checkpoint_step is not None:
            state.next_step = (
                f"deploy_training_job(job_name={job_name!r}, ...) with the same parameters "
                f"(runs_dir, checkpoint_dir) resumes from step {metrics.checkpoint_step}."
            )
        elif status == "running":
            state.next_step = (
                f"get_training_job(job_name={job_name!r}, wait_seconds=...) to follow it; "
                f"cancel_training_job(job_name={job_name!r}) to stop it."
            )
        return state

    # logs / cancel ---------------------------------------------------------

    def log_path(self, job_name: str) -> str:
        return self._require_record(job_name)["log_path"]

    def logs(self, job_name: str, tail_lines: int | None = None) -> str:
        try:
            text = Path(self.log_path(job_name)).read_text(errors="replace")
        except FileNotFoundError:
            return ""
        lines = text.splitlines()
        if tail_lines is not None:
            lines = lines[-tail_lines:]
        return redact("\n".join(lines))

    def list_jobs(self) -> list[JobState]:
        """Every job with a record under runs_dir, newest first."""
        records = sorted(
            self.runs_dir.glob(f"*/{RECORD}"), key=lambda p: p.stat().st_mtime, reverse=True
        )
        return [self.describe(path.parent.name) for path in records]

    def cancel(self, job_name: str, grace_s: float = 30.0) -> JobState:
        """SIGTERM the job's process group (torchrun passes it to every rank), then
        SIGKILL after `grace_s` seconds."""
        record = self._require_record(job_name)
        if self._alive(job_name, record):
            record["cancelled"] = True
            self._write_record(job_name, record)
            self._signal(record["pid"], signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while self._alive(job_name, record) and time.monotonic() < deadline:
                time.sleep(POLL_S)
            if self._alive(job_name, record):
                self._signal(record["pid"], signal.SIGKILL)
                while self._alive(job_name, record):
                    time.sleep(POLL_S)
        return self.describe(job_name)

    @staticmethod
    def _signal(pid: int, sig: signal.Signals) -> None:
        try:
            os.killpg(pid, sig)  # the job leads its own session, so pgid == pid
        except ProcessLookupError:
            pass

    # the job record --------------------------------------------------------

    def _alive(self, job_name: str, record: dict[str, Any]) -> bool:
        proc = _children.get(self.run_dir(job_name))
        if proc is not None and proc.pid == record["pid"]:
            code = proc.poll()
            if code is None:
                return True
            if record.get("exit_code") is None:
                record["exit_code"] = code
                self._write_record(job_name, record)
            return False
        return _pid_running(record["pid"])

    @staticmethod
    def _read_from(path: Path, offset: int) -> bytes:
        try:
            with open(path, "rb") as handle:
                handle.seek(offset)
                return handle.read()
        except FileNotFoundError:
            return b""

    def _read_record(self, job_name: str) -> dict[str, Any] | None:
        try:
            return json.loads((self.run_dir(job_name) / RECORD).read_text())
        except FileNotFoundError:
            return None

    def _require_record(self, job_name: str) -> dict[str, Any]:
        record = self._read_record(job_name)
        if record is None:
            raise ToolFailure(
                ErrorCode.JOB_NOT_FOUND,
                f"No local job named {job_name!r} under {self.runs_dir}.",
                "Check the job name and runs_dir, or start it with deploy_training_job.",
            )
        return record

    def _write_record(self, job_name: str, record: dict[str, Any]) -> None:
        path = self.run_dir(job_name) / RECORD
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(record, indent=2))
        tmp.replace(path)  # atomic: a reader never sees half a record
