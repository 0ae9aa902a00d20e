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
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError

from skills.catalog.pricing import Billing
from skills.cloud.clients import env_region
from skills.operations import processes
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
from skills.training_job_deployer.memory_estimate import node_runtime
from skills.training_job_deployer.models import JobState
from skills.training_job_deployer.targets.base import Plan, TargetSettings
from skills.training_job_deployer.targets.run_dir import (
    CHECKPOINTS,
    LOG_CHUNK_BYTES,
    LOG_TAIL_LINES,
    JobOutcome,
    RunDirTarget,
    cancelled_message,
    keep_outcome,
    local_path,
)
from skills.training_job_deployer.targets.slurm.record import (
    FINAL_STATES,
    SLURM_RECORD,
    SlurmEnd,
    SlurmRecord,
    SlurmRunDir,
)
from skills.training_job_deployer.targets.slurm.scheduler import Scheduler
from skills.training_job_deployer.targets.slurm.script import PartitionInfo, layout, render
from skills.training_job_deployer.targets.slurm.settings import (
    SlurmDeploySettings,
    SlurmSettings,
)
from skills.training_job_deployer.trainer_log import (
    EXIT_PREEMPTED,
    RunMetrics,
    tail_with_error,
)

POLL_S = 1.0
# Failures that mean Slurm cannot be asked from here (no clients, no controller, no ssh
# route), as opposed to Slurm's own refusals: a dry run goes on without the partition.
UNREACHABLE = (ErrorCode.SLURM_UNAVAILABLE, ErrorCode.ENDPOINT_UNREACHABLE)


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
        return self.scheduler.partition(self.settings.partition)

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
            launcher=launcher(spec, python),
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
        # The nodes' /dev/shm is not read: the plan says what each needs.
        runtime = node_runtime(spec, shape.gpus_per_node is not None, None)
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
            async_save=runtime.async_save,
            process_group=runtime.process_group,
            # sbatch exports the submitting environment (HF_TOKEN, HF_HOME) to the job.
            hub=hub_lines(spec, hub_cache(os.environ), token_source(os.environ)),
        )

    # submit ----------------------------------------------------------------

    def _before_submit(self, plan: SlurmPlan) -> None:
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

    def _still_running(  # type: ignore[override]
        self, run: SlurmRunDir, previous: SlurmRecord
    ) -> ToolFailure | None:
        self._check_host(previous)
        if not self._active(previous):
            return None
        return ToolFailure(
            ErrorCode.JOB_RUNNING,
            f"Job {run.job_name!r} is already in Slurm (job {previous.slurm_job_id}).",
            "Follow it with get_training_job, stop it with cancel_training_job, "
            "or deploy under another job_name.",
            {"slurm_job_id": previous.slurm_job_id},
        )

    def _start(  # type: ignore[override]
        self, run: SlurmRunDir, plan: SlurmPlan, previous: SlurmRecord | None
    ) -> None:
        del previous
        # Slurm opens the output file but makes no directory.
        if self.settings.ssh_host is None:
            Path(run.cluster_dir, "logs").mkdir(parents=True, exist_ok=True)
            self.claim_checkpoint(plan.checkpoint_dir, run, plan.adopt_checkpoint_dir)
        else:
            self.scheduler.check(["mkdir", "-p", "--", f"{run.cluster_dir}/logs"])
        (run.path / "slurm-batch.sh").write_text(plan.script)
        job_id = self.scheduler.submit(plan.script)
        run.record_file.write(
            SlurmRecord(
                job_name=run.job_name,
                slurm_job_id=job_id,
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
        return self.scheduler.job_state(record.slurm_job_id)

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
            state.log_tail = tail_with_error(self._tail(log, LOG_TAIL_LINES), state.error)
        if record.end is not None and record.outcome is None:
            keep_outcome(
                run,
                _outcome_once(
                    JobOutcome(status=status, message=state.message, figures=metrics.state_fields())
                ),
            )
        state.suggest_next_step(self.call_args())
        return state

    def listed(self, job_name: str) -> JobState:
        """An ended job from its record's outcome (no log read); any other as describe."""
        run = self._run(job_name)
        record = self._open(run)
        end, outcome = record.end, record.outcome
        if end is None or outcome is None:
            return self.describe(job_name)
        try:
            state = JobState(
                job_name=job_name,
                target=self.name,
                status=outcome.status,
                **{k: v for k, v in outcome.figures.items() if k in JobState.model_fields},
                run_dir=run.cluster_dir,
                log_path=self._where(run.log(record.slurm_job_id)),
                exit_code=end.exit_code,
                restarts=end.restarts,
                message=outcome.message,
            )
        except ValidationError:  # figures an edit made wrong: the log says
            return self.describe(job_name)
        state.suggest_next_step(self.call_args())
        return state

    # logs / cancel / list --------------------------------------------------

    def _check_ours(self, run: SlurmRunDir, record: SlurmRecord) -> None:
        """scancel only the Slurm job this record's job submitted: its name is the job's
        (from the call, not the record) and its user is the one we run Slurm as. A record
        naming another job was edited; nothing is cancelled and the caller is told."""
        owner = self.scheduler.job_owner(record.slurm_job_id)
        if owner is None:
            return  # the controller no longer knows it: scancel would not reach it either
        name, user = owner
        if name == run.job_name and user == self.scheduler.user():
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

    def _where(self, path: str) -> str:  # type: ignore[override]
        return path if self.settings.ssh_host is None else f"{self.settings.ssh_host}:{path}"

    def _read_from(self, log: str, offset: int, max_bytes: int = LOG_CHUNK_BYTES) -> bytes:
        if self.settings.ssh_host is None:
            return super()._read_from(log, offset, max_bytes)
        if offset < 0:  # the end: at most -offset bytes
            argv = ["tail", "-c", str(min(-offset, max_bytes)), "--", log]
        else:  # bounded on the remote side too: only max_bytes cross the connection
            argv = [
                "dd",
                f"if={log}",
                "iflag=skip_bytes,count_bytes",
                f"skip={offset}",
                f"count={max_bytes}",
                "status=none",
            ]
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


def _outcome_once(outcome: JobOutcome) -> Callable[[SlurmRecord | None], SlurmRecord | None]:
    """The record with `outcome`, if it ended and has none yet (the end is final)."""

    def add(record: SlurmRecord | None) -> SlurmRecord | None:
        if record is None or record.end is None or record.outcome is not None:
            return None
        return record.model_copy(update={"outcome": outcome})

    return add
