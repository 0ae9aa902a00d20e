"""The Slurm target: one batch job (sbatch) that runs `srun torchrun` on every node.
plan -> submit -> describe -> logs -> cancel, over Slurm's own clients.

plan reads the partition (sinfo) and renders the batch script (script.py);
submit pipes exactly that script to `sbatch --parsable`; describe reads
`scontrol show job` (`sacct` once the controller has forgotten the job, where
accounting exists) and the trainer's JSON lines in the job's output file; cancel is
`scancel` (SIGTERM: the trainer checkpoints). With `ssh_host`, every one of these
commands runs on that login node (argv quoted for its shell, the script over stdin).

Each job has `<runs_dir>/<job_name>/` on the cluster (logs/slurm-<id>.log, default
checkpoints) and, on this host, the same directory holding `slurm.json`: the Slurm job
id and how it ended, so any process finds the job. With no ssh_host both are one
directory, which the nodes must see (a shared filesystem).
"""

from __future__ import annotations

import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from skills.cloud.clients import env_region
from skills.operations import processes
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.paths import path_fields
from skills.shared.secrets import redact
from skills.shared.waiting import poll_until
from skills.training_job_deployer.job_spec import (
    JobName,
    JobSpec,
    hub_cache,
    hub_lines,
    token_source,
    trainer_argv,
)
from skills.training_job_deployer.models import JobState
from skills.training_job_deployer.targets.base import Billing, Plan, TargetSettings
from skills.training_job_deployer.targets.run_dir import (
    CHECKPOINTS,
    LOG_CHUNK_BYTES,
    LOG_TAIL_LINES,
    RecordedRun,
    RunDirTarget,
    RunsDir,
    cancelled_message,
    local_path,
)
from skills.training_job_deployer.targets.slurm.script import (
    SBATCH_PATH,
    PartitionInfo,
    layout,
    render,
)
from skills.training_job_deployer.trainer_log import (
    EXIT_PREEMPTED,
    RunMetrics,
)

SLURM_RECORD = "slurm.json"
POLL_S = 1.0
COMMAND_TIMEOUT_S = 60
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
# Failures that mean Slurm cannot be asked from here (no clients, no controller, no ssh
# route), as opposed to Slurm's own refusals: a dry run goes on without the partition.
UNREACHABLE = (ErrorCode.SLURM_UNAVAILABLE, ErrorCode.ENDPOINT_UNREACHABLE)
SLURM_NAME = r"^[A-Za-z0-9_.-]{1,64}$"
# Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S.
SLURM_TIME = r"^(\d{1,7}(:\d{1,2}){0,2}|\d{1,4}-\d{1,2}(:\d{1,2}){0,2})$"
# An ssh destination ([user@]host or an ssh_config alias); never an option.
SSH_HOST = r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,253}$"


def _matching(pattern: str, rule: str) -> AfterValidator:
    """A pattern checked by validation but kept out of the tools' schemas (every job
    tool carries these fields); the error says the rule in words."""

    def check(value: str | None) -> str | None:
        if value is not None and not re.fullmatch(pattern, value):
            raise ValueError(rule)
        return value

    return AfterValidator(check)


class SlurmSettings(TargetSettings):
    """sbatch + srun torchrun"""

    target: Literal["slurm"]
    runs_dir: Annotated[
        RunsDir,
        _matching(r"(~/)?" + SBATCH_PATH.strip("^"), "on Slurm: letters, digits, _ . / + = @ -"),
    ] = "runs"
    ssh_host: Annotated[
        str | None,
        Field(description="Slurm: login node to ssh to."),
        _matching(SSH_HOST, "[user@]host or an ssh_config alias"),
    ] = None

    @property
    def job_runs_here(self) -> bool:
        # Without ssh this host is a login node sharing the cluster's filesystem.
        return self.ssh_host is None


class SlurmDeploySettings(SlurmSettings):
    """sbatch + srun torchrun"""

    partition: Annotated[
        str | None,
        Field(description="Slurm partition (default: the default one)."),
        _matching(SLURM_NAME, "letters, digits, _ . - (at most 64)"),
    ] = None
    account: Annotated[
        str | None,
        Field(description="Slurm account to charge."),
        _matching(SLURM_NAME, "letters, digits, _ . - (at most 64)"),
    ] = None
    time_limit: Annotated[
        str | None,
        Field(description="Slurm time limit, e.g. 24:00:00 or 2-00:00:00."),
        _matching(SLURM_TIME, "Slurm's time format: M, M:S, H:M:S, D-H, D-H:M or D-H:M:S"),
    ] = None
    venv: Annotated[
        str | None,
        Field(max_length=4096, description="Slurm: venv on the nodes, for its bin/python."),
        _matching(r"[^-\s\x00-\x1f\x7f][^\x00-\x1f\x7f]*", "a path, not an option"),
    ] = None
    container_image: Annotated[
        str | None,
        Field(max_length=512, description="Slurm: container image (pyxis)."),
        _matching(r"[A-Za-z0-9][A-Za-z0-9._/:@+#-]*", "an image reference"),
    ] = None


class SlurmPlan(Plan):
    """Exactly what submit does: pipe `script` to `sbatch --parsable` (on ssh_host)."""

    target: Literal["slurm"] = "slurm"
    script: str = Field(description="The batch script, exactly as sbatch gets it.")
    sbatch: list[str] = Field(description="The submit command (argv, the script on stdin).")
    partition: str
    nodes: int
    nproc_per_node: int
    gpus_per_node: int | None = Field(description="None: CPU processes (no GPU on the nodes).")
    efa: bool
    instance_type: str | None = Field(
        default=None, description="The nodes' instance type, where their features name one."
    )
    run_dir: str = Field(description="The job's directory on the cluster.")
    log_path: str = Field(description="The job's output file (%j: the Slurm job id).")
    checkpoint_dir: str
    adopt_checkpoint_dir: bool = False
    not_read: list[str] = Field(
        default_factory=list,
        description="Partition facts sinfo could not read (Slurm unreachable): not checked.",
    )
    not_read_because: str | None = Field(default=None, description="Why Slurm was unreachable.")
    hub: list[str] = Field(default_factory=list, description="Hub ids fetched, and where.")

    def not_read_line(self) -> str | None:
        """The facts this plan did not read, in one line (None: all were read)."""
        if not self.not_read:
            return None
        return (
            f"{', '.join(self.not_read)}: not checked (the script assumes the job's "
            f"num_nodes and gpu_per_node; submit reads them). {self.not_read_because}"
        )

    def billing(self) -> Billing | None:
        # Only nodes whose type the catalogue knows (ParallelCluster's) are priced; a
        # region the environment does not name is priced at us-east-1's (the estimate
        # says so).
        if self.instance_type is None:
            return None
        return Billing(self.instance_type, self.nodes, env_region())

    def to_display(self) -> list[tuple[str, Any]]:
        unread = self.not_read_line()
        return [
            ("submit", shlex.join(self.sbatch) + " < script"),
            ("run dir", self.run_dir),
            *[("hub", line) for line in self.hub],
            *([("not read", unread)] if unread else []),
            ("script", "\n" + self.script),
        ]

    def plain_text(self) -> str:
        """The CLI's --dry_run prints the script exactly, ready for sbatch (what was not
        read from the partition follows as a shell comment)."""
        unread = self.not_read_line()
        if unread is None:
            return self.script
        return self.script.rstrip("\n") + "\n# not read (Slurm unreachable): " + unread + "\n"


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


class Scheduler:
    """Slurm's client commands, run here or, with `ssh_host`, on that host over ssh."""

    def __init__(self, ssh_host: str | None) -> None:
        self.ssh_host = ssh_host

    def argv(self, argv: list[str]) -> list[str]:
        if self.ssh_host is None:
            return argv
        # ssh hands the remote shell one string: each argument quoted for it.
        return ["ssh", "-o", "BatchMode=yes", "--", self.ssh_host, shlex.join(argv)]

    def run(
        self, argv: list[str], stdin: bytes | None = None, timeout: float = COMMAND_TIMEOUT_S
    ) -> subprocess.CompletedProcess[bytes]:
        full = self.argv(argv)
        if shutil.which(full[0]) is None:
            where = "" if self.ssh_host is None else f" (needed to reach {self.ssh_host})"
            raise ToolFailure(
                ErrorCode.SLURM_UNAVAILABLE,
                f"{full[0]} is not on PATH{where}.",
                "Run this on a Slurm login node (Slurm's clients installed), or set ssh_host "
                "to one."
                if self.ssh_host is None
                else "Install an OpenSSH client.",
                {"command": full[0]},
            )
        try:
            done = subprocess.run(
                full, input=stdin, capture_output=True, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise ToolFailure(
                ErrorCode.SLURM_UNAVAILABLE,
                f"{argv[0]} did not answer within {timeout:.0f} s.",
                "Check that slurmctld is up (sinfo) and reachable from here.",
                {"command": argv[0]},
            ) from None
        if self.ssh_host is not None and done.returncode == 255:
            raise ToolFailure(
                ErrorCode.ENDPOINT_UNREACHABLE,
                f"ssh to {self.ssh_host} failed: {_text(done.stderr)}",
                "Check that `ssh <ssh_host>` works without a password prompt (keys, ssh_config).",
                {"ssh_host": self.ssh_host},
            )
        return done

    def check(self, argv: list[str], stdin: bytes | None = None) -> str:
        """stdout of a command that must succeed; a failure carries Slurm's message."""
        done = self.run(argv, stdin)
        if done.returncode != 0:
            raise _slurm_failure(argv, done)
        return done.stdout.decode(errors="replace")


def _text(data: bytes) -> str:
    return " ".join(data.decode(errors="replace").split())[:500]


def _slurm_failure(argv: list[str], done: subprocess.CompletedProcess[bytes]) -> ToolFailure:
    said = _text(done.stderr) or _text(done.stdout) or f"exit status {done.returncode}"
    if "Unable to contact slurm controller" in said or "Could not establish" in said:
        return ToolFailure(
            ErrorCode.SLURM_UNAVAILABLE,
            f"{argv[0]}: {said}",
            "Check that slurmctld runs and SLURM_CONF (or the login node's setup) points "
            "at it: `sinfo` should list partitions.",
            {"command": argv[0]},
        )
    return ToolFailure(
        ErrorCode.SLURM_REJECTED,
        f"{argv[0]} refused: {said}",
        "Fix what Slurm names (partition, account, time limit, GPUs) and call again; "
        "`sinfo` lists partitions and their limits.",
        {"command": argv[0]},
    )


def _fields(line: str) -> dict[str, str]:
    """`Key=Value` pairs of one `scontrol -o` line (values with spaces are cut)."""
    return dict(re.findall(r"(?:^|\s)([A-Za-z]+)=(\S*)", line))


def _exit_code(value: str | None) -> int | None:
    """Slurm's `exit:signal` as one number (128 + signal when a signal ended it)."""
    if not value or ":" not in value:
        return None
    code, sig = value.split(":", 1)
    try:
        return 128 + int(sig) if int(sig) else int(code)
    except ValueError:
        return None


class SlurmRunDir(RecordedRun[SlurmRecord]):
    """`<runs_dir>/<job_name>/`: on this host the record, on the cluster the job's files."""

    def __init__(self, record_dir: Path, cluster_dir: str) -> None:
        super().__init__(record_dir, SLURM_RECORD, SlurmRecord, "Slurm")
        self.cluster_dir = cluster_dir

    def log(self, job_id: int | str) -> str:
        return f"{self.cluster_dir}/logs/slurm-{job_id}.log"  # the template's --output


class SlurmTarget(RunDirTarget[SlurmPlan]):
    name: ClassVar[str] = "slurm"
    settings_model: ClassVar[type[TargetSettings]] = SlurmSettings
    deploy_settings_model: ClassVar[type[TargetSettings]] = SlurmDeploySettings
    plan_model: ClassVar[type[Plan]] = SlurmPlan
    record_name: ClassVar[str] = SLURM_RECORD
    poll_s: ClassVar[float] = POLL_S

    def __init__(self, settings: SlurmSettings) -> None:
        # The job tools pass the access settings; a plan reads the deploy ones (defaults).
        if not isinstance(settings, SlurmDeploySettings):
            settings = SlurmDeploySettings(**settings.model_dump())
        self.settings = settings
        self.scheduler = Scheduler(settings.ssh_host)
        runs = settings.runs_dir
        self.runs_dir = Path(runs).expanduser().resolve()
        # On the cluster: the same path, or with ssh, relative to the login home.
        self.cluster_runs = str(self.runs_dir) if settings.ssh_host is None else runs
        if settings.ssh_host is not None:
            self.cluster_runs = runs.removeprefix("~/")

    def _run(self, job_name: str) -> SlurmRunDir:
        return SlurmRunDir(self.runs_dir / job_name, f"{self.cluster_runs}/{job_name}")

    # plan ------------------------------------------------------------------

    def partition(self) -> PartitionInfo:
        """The settings' partition (else the default one), as its nodes are now."""
        out = self.scheduler.check(["sinfo", "--noheader", "--format=%P|%c|%G|%f|%D"])
        rows: dict[str, list[tuple[str, str, str, str]]] = {}
        default = None
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) != 5:
                continue
            name = parts[0].rstrip("*")
            if parts[0].endswith("*"):
                default = name
            rows.setdefault(name, []).append((parts[1], parts[2], parts[3], parts[4]))
        wanted = self.settings.partition or default
        if wanted is None or wanted not in rows:
            known = ", ".join(sorted(rows)) or "none"
            said = (
                "no default partition"
                if wanted is None
                else _text(self.scheduler.run(["scontrol", "show", "partition", wanted]).stdout)
                or f"partition {wanted} not found"
            )
            raise ToolFailure(
                ErrorCode.NOT_FOUND,
                f"Slurm: {said}.",
                f"Pick one of the cluster's partitions: {known}.",
                {"partitions": sorted(rows)},
            )
        return PartitionInfo.from_sinfo(wanted, rows[wanted])

    def plan(self, spec: JobSpec) -> SlurmPlan:
        """The plan on the partition as sinfo reads it; where Slurm cannot be reached,
        the plan on the partition the job asks for, naming the facts not read (a dry
        run's preview: submit refuses such a plan)."""
        self.check_run_dir_free(self._run(spec.job_name))
        try:
            info = self.partition()
        except ToolFailure as failure:
            if failure.code not in UNREACHABLE:
                raise
            name = self.settings.partition or "(default)"
            assumed = PartitionInfo.assumed(name, spec.num_nodes, spec.gpu_per_node)
            return self.plan_for(spec, assumed).model_copy(
                update={
                    "not_read": PartitionInfo.facts_not_read(self.settings.partition is not None),
                    "not_read_because": failure.message,
                }
            )
        return self.plan_for(spec, info)

    def plan_for(self, spec: JobSpec, info: PartitionInfo) -> SlurmPlan:
        """The plan for a partition whose nodes are as `info` says (no scheduler asked)."""
        settings = self.settings
        run = self._run(spec.job_name)
        shape = layout(spec.num_nodes, spec.gpu_per_node, info)
        remote = settings.ssh_host is not None
        if not remote:  # paths on this host (and so on the nodes) are made absolute
            spec = spec.model_copy(
                update={
                    name: local_path(getattr(spec, name), maybe_name=marker.hub_name)
                    for name, marker in path_fields(type(spec)).items()
                }
            )
        checkpoint_dir = spec.checkpoint_dir or f"{run.cluster_dir}/{CHECKPOINTS}"
        if not remote:
            self.check_checkpoint_owner(checkpoint_dir, run, spec.adopt_checkpoint_dir)
        spec = spec.model_copy(update={"checkpoint_dir": checkpoint_dir})
        if settings.container_image:
            mounts = [run.cluster_dir]
            if not checkpoint_dir.startswith("s3://"):
                mounts.append(checkpoint_dir)
            if any("," in m or ":" in m for m in mounts):
                raise ToolFailure(
                    ErrorCode.INVALID_INPUT,
                    "With container_image, runs_dir and checkpoint_dir may not hold ',' or ':' "
                    "(pyxis's --container-mounts syntax).",
                    "Pick paths without them.",
                )
            container = [
                f"--container-image={settings.container_image}",
                f"--container-mounts={','.join(dict.fromkeys(mounts))}",
            ]
            python = "python"
        else:
            container = []
            # Without ssh the nodes share this host's files: its Python serves them too.
            default = "python3" if remote else sys.executable
            python = f"{settings.venv}/bin/python" if settings.venv else default
        script = render(
            job_name=spec.job_name,
            layout=shape,
            trainer_args=[*trainer_argv(spec), "--output_dir", run.cluster_dir],
            log_dir=f"{run.cluster_dir}/logs",
            python=python,
            max_restarts=spec.max_restarts,
            partition=settings.partition,
            account=settings.account,
            time_limit=settings.time_limit,
            efa=info.efa,
            rdma=info.rdma,
            container_args=container,
            # Here, the nodes see this checkout: they run these tools' trainer, as the
            # local target does (a path a node lacks is skipped by Python).
            code_dir=None if remote or settings.container_image else processes.PROJECT_ROOT,
            job_env=spec.env,
        )
        return SlurmPlan(
            script=script,
            sbatch=self.scheduler.argv(["sbatch", "--parsable"]),
            partition=info.name,
            nodes=shape.nodes,
            nproc_per_node=shape.nproc_per_node,
            gpus_per_node=shape.gpus_per_node,
            efa=info.efa and shape.gpus_per_node is not None,
            instance_type=info.instance_type,
            run_dir=run.cluster_dir,
            log_path=run.log("%j"),
            checkpoint_dir=checkpoint_dir,
            adopt_checkpoint_dir=spec.adopt_checkpoint_dir,
            # sbatch exports the submitting environment (HF_TOKEN, HF_HOME) to the job.
            hub=hub_lines(spec, hub_cache(os.environ), token_source(os.environ)),
        )

    # submit ----------------------------------------------------------------

    def submit(
        self, job_name: str, plan: SlurmPlan, *, replace_corrupt_record: bool = False
    ) -> None:
        if plan.not_read:
            # Made without the partition: Slurm's failure now (as a plan's would be),
            # or, had it come back since, a plan to make again.
            self.partition()
            raise ToolFailure(
                ErrorCode.SLURM_UNAVAILABLE,
                "This plan was made while Slurm was unreachable: "
                f"{', '.join(plan.not_read)} were not read.",
                "Deploy again: the plan then reads the partition.",
            )
        run = self._run(job_name)
        run.path.mkdir(parents=True, exist_ok=True)
        with run.record_file.lock():
            record = run.previous(replace_corrupt_record)
            if record is not None:
                self._check_host(record)
                if self._active(record):
                    raise ToolFailure(
                        ErrorCode.JOB_RUNNING,
                        f"Job {job_name!r} is already in Slurm (job {record.slurm_job_id}).",
                        "Follow it with get_training_job, stop it with cancel_training_job, "
                        "or deploy under another job_name.",
                        {"slurm_job_id": record.slurm_job_id},
                    )
            # Slurm opens the output file but makes no directory.
            if self.settings.ssh_host is None:
                Path(run.cluster_dir, "logs").mkdir(parents=True, exist_ok=True)
                self.claim_checkpoint(plan.checkpoint_dir, run, plan.adopt_checkpoint_dir)
            else:
                self.scheduler.check(["mkdir", "-p", "--", f"{run.cluster_dir}/logs"])
            (run.path / "slurm-batch.sh").write_text(plan.script)
            out = self.scheduler.check(["sbatch", "--parsable"], stdin=plan.script.encode())
            job_id = out.strip().split(";")[0]
            if not job_id.isdigit():
                raise ToolFailure(
                    ErrorCode.SLURM_REJECTED,
                    f"sbatch answered {out.strip()[:200]!r}, not a job id.",
                    "Look at the cluster's sbatch (a wrapper?) and call again.",
                )
            run.record_file.write(
                SlurmRecord(
                    job_name=job_name,
                    slurm_job_id=int(job_id),
                    ssh_host=self.settings.ssh_host,
                    submitted_at=time.time(),
                )
            )

    def _check_host(self, record: SlurmRecord) -> None:
        if record.ssh_host != self.settings.ssh_host:
            raise ToolFailure(
                ErrorCode.INVALID_INPUT,
                f"Job {record.job_name!r} was submitted "
                + (f"through ssh_host {record.ssh_host!r}" if record.ssh_host else "from here")
                + ", not as this call says.",
                "Call again with the ssh_host the job was deployed with.",
                {"ssh_host": record.ssh_host},
            )

    # describe / follow -----------------------------------------------------

    def _active(self, record: SlurmRecord) -> bool:
        """Queued or running (a job the scheduler no longer knows has ended)."""
        if record.end is not None:
            return False
        state = self._scheduler_state(record)
        return state is not None and state.state not in FINAL_STATES

    def _scheduler_state(self, record: SlurmRecord) -> SlurmEnd | None:
        """The job's state now (None: the scheduler no longer knows it)."""
        job = str(record.slurm_job_id)
        done = self.scheduler.run(["scontrol", "show", "job", "-o", job])
        if done.returncode == 0:
            fields = _fields(done.stdout.decode(errors="replace").strip())
            state = fields.get("JobState", "")
            if re.fullmatch(r"[A-Z_]{1,32}", state):
                reason = fields.get("Reason")
                return SlurmEnd(
                    state=state,
                    exit_code=_exit_code(fields.get("ExitCode")),
                    restarts=int(fields.get("Restarts", "0") or 0),
                    reason=None if reason in (None, "None", "(null)") else reason[:200],
                )
        elif b"Invalid job id" not in done.stderr:
            raise _slurm_failure(["scontrol"], done)
        # Gone from the controller (MinJobAge): accounting, where the cluster has it.
        acct = self.scheduler.run(
            ["sacct", "--noheader", "--parsable2", "-X", "-j", job, "--format=State,ExitCode"]
        )
        line = acct.stdout.decode(errors="replace").strip().splitlines()
        if acct.returncode == 0 and line and "|" in line[0]:
            state, code = line[0].split("|", 1)
            state = state.split()[0] if state else ""
            if re.fullmatch(r"[A-Z_]{1,32}", state):
                return SlurmEnd(state=state, exit_code=_exit_code(code))
        return None

    def _open(self, run: SlurmRunDir) -> SlurmRecord:  # type: ignore[override]
        record = run.require()
        self._check_host(record)
        return record

    def _log_of(self, run: SlurmRunDir, record: SlurmRecord) -> str:  # type: ignore[override]
        return run.log(record.slurm_job_id)

    def _poll(  # type: ignore[override]
        self, run: SlurmRunDir
    ) -> tuple[SlurmRecord, bool, SlurmEnd | None]:
        """Poll the scheduler (the job's log is read as it grows, across requeues)."""
        record = run.require()
        state = record.end or self._scheduler_state(record)
        done = state is None or state.state in FINAL_STATES
        if done and record.end is None and state is not None:
            record = self._keep_end(run, state)
        return record, done, state

    @staticmethod
    def _keep_end(run: SlurmRunDir, end: SlurmEnd) -> SlurmRecord:
        """Write the final state into the record: the controller forgets ended jobs."""
        kept = run.record_file.update(
            lambda r: None if r is None or r.end is not None else r.model_copy(update={"end": end})
        )
        assert kept is not None
        return kept

    def _state(  # type: ignore[override]
        self,
        run: SlurmRunDir,
        record: SlurmRecord,
        slurm: SlurmEnd | None,
        metrics: RunMetrics,
        done: bool,
    ) -> JobState:
        job_name = run.job_name
        log = run.log(record.slurm_job_id)
        exit_code = None if slurm is None else slurm.exit_code
        said = (
            ""
            if slurm is None
            else f"Slurm {slurm.state}" + (f" ({slurm.reason})" if slurm.reason else "")
        )
        message: str | None = None
        if slurm is None:
            status = "unknown"
            message = (
                f"Slurm no longer knows job {record.slurm_job_id} and has no accounting; "
                "see the log"
            )
        elif slurm.state not in FINAL_STATES:
            status = "running"
            if slurm.state != "RUNNING":
                message = f"{said}; restarts: {slurm.restarts}"
        elif record.cancel_requested_at is not None or slurm.state == "CANCELLED":
            status, message = "cancelled", cancelled_message(metrics)
        elif slurm.state in ("TIMEOUT", "PREEMPTED") or (
            metrics.preempted is not None or exit_code == EXIT_PREEMPTED
        ):
            status = "preempted"
            message = f"{said}: " + (metrics.outcome(EXIT_PREEMPTED) or "")
        else:
            message = metrics.outcome(exit_code)
            if slurm.state != "COMPLETED" and message is None:
                message = f"failed: {said}, exit code {exit_code}"
            status = "succeeded" if message is None else "failed"
            if status == "failed" and slurm.state != "COMPLETED":
                message = f"{said}: {message}"
        state = JobState(
            job_name=job_name,
            target=self.name,
            status=status,
            **metrics.state_fields(),
            run_dir=run.cluster_dir,
            log_path=self._where(log),
            exit_code=exit_code,
            restarts=None if slurm is None else slurm.restarts,
            message=None if message is None else redact(message),
        )
        if status == "failed":
            state.log_tail = self._tail(log, LOG_TAIL_LINES)
        state.suggest_next_step(self.call_args())
        return state

    # logs / cancel / list --------------------------------------------------

    def _check_ours(self, run: SlurmRunDir, record: SlurmRecord) -> None:
        """scancel only the Slurm job this record's job submitted: its name is the job's
        (from the call, not the record) and its user is the one we run Slurm as. A record
        naming another job was edited; nothing is cancelled and the caller is told."""
        done = self.scheduler.run(["scontrol", "show", "job", "-o", str(record.slurm_job_id)])
        if done.returncode != 0:
            return  # the controller no longer knows it: scancel would not reach it either
        fields = _fields(done.stdout.decode(errors="replace").strip())
        name, user = fields.get("JobName", ""), fields.get("UserId", "").split("(")[0]
        if name == run.job_name and user == self._slurm_user():
            return
        raise ToolFailure(
            ErrorCode.JOB_RECORD_CORRUPT,
            f"The record {run.record_file.path} names Slurm job {record.slurm_job_id}, which "
            f"is {name[:100]!r} of user {user[:100]!r}, not job {run.job_name!r} of this "
            "user; nothing was cancelled.",
            "The record was edited or is stale: find the job with squeue, then deploy "
            "again with --replace_corrupt_record if it is not running.",
            {"slurm_job_id": record.slurm_job_id, "reason": "not_our_job"},
        )

    def _slurm_user(self) -> str:
        """The user Slurm commands run as: this one, or ssh_host's login."""
        if self.settings.ssh_host is None:
            return pwd.getpwuid(os.getuid()).pw_name
        return self.scheduler.check(["id", "-un"]).strip()

    def _where(self, path: str) -> str:  # type: ignore[override]
        return path if self.settings.ssh_host is None else f"{self.settings.ssh_host}:{path}"

    def _read_from(self, log: str, offset: int, max_bytes: int = LOG_CHUNK_BYTES) -> bytes:
        if self.settings.ssh_host is None:
            return super()._read_from(log, offset, max_bytes)
        if offset < 0:  # the end: at most -offset bytes
            argv = ["tail", "-c", str(min(-offset, max_bytes)), "--", log]
        else:  # bounded on the remote side too: only max_bytes cross the connection
            argv = ["dd", f"if={log}", "iflag=skip_bytes,count_bytes", f"skip={offset}",
                    f"count={max_bytes}", "status=none"]  # fmt: skip
        done = self.scheduler.run(argv)
        return done.stdout if done.returncode == 0 else b""

    def _log_size(self, log: str) -> int:
        if self.settings.ssh_host is None:
            return super()._log_size(log)
        done = self.scheduler.run(["stat", "-c", "%s", "--", log])
        return int(done.stdout) if done.returncode == 0 and done.stdout.strip().isdigit() else 0

    def cancel(self, job_name: str, grace_s: float = 30.0) -> JobState:
        """scancel: Slurm sends SIGTERM to the steps and the batch script (the trainer
        checkpoints), SIGKILL after the cluster's KillWait. Returns once the job ended
        (or `grace_s` + 30 s passed). A job that ended already is left as it is."""
        run = self._run(job_name)
        record = run.require()
        self._check_host(record)
        if record.end is not None:
            return self.describe(job_name)
        self._check_ours(run, record)
        run.record_file.update(
            lambda r: (
                None
                if r is None or r.end is not None or r.cancel_requested_at is not None
                else r.model_copy(update={"cancel_requested_at": time.time()})
            )
        )
        self.scheduler.check(["scancel", str(record.slurm_job_id)])
        poll_until(lambda: self._active(record), lambda active: not active, grace_s + 30, POLL_S)
        return self.describe(job_name)
