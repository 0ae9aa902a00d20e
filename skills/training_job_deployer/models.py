"""What the job tools return: the job's state and its log."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from skills.kube.pod_metrics import usage_text
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.next_step import POLL_WAIT_S, NextStep
from skills.shared.results import ToolResult

# preempted: stopped by SIGTERM (eviction, spot reclaim); a re-run of the job resumes.
# unknown: its record cannot be read (the message says why).
JobStatus = Literal[
    "planned", "running", "succeeded", "failed", "preempted", "cancelled", "unknown"
]
# The statuses a job does not leave (the one definition; targets, follow loops and
# auto-retry read it). An operation's are operation_state.TERMINAL: no "preempted".
TERMINAL: tuple[JobStatus, ...] = ("succeeded", "failed", "preempted", "cancelled")


class WatchFinding(BaseModel):
    """What the watchdog (watchdog.py) sees in a job's step lines: the doctor's finding
    shape (code, what was seen, what to do)."""

    code: str = Field(
        description="straggler, throughput_degraded, gpus_idle, gpu_throttled or job_hung."
    )
    message: str
    hint: str
    rank: int | None = None
    host: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)


class JobState(ToolResult):
    job_name: str
    target: str
    engine: str | None = None  # kubernetes: the job's kind, pytorchjob or trainjob
    status: JobStatus
    steps: int = 0
    max_steps: int | None = None
    first_loss: float | None = None
    last_loss: float | None = None
    tokens_per_s: float | None = None
    world_size: int | None = None
    last_eval_loss: float | None = None
    resumed_from: int | None = Field(
        default=None, description="The checkpoint step this run resumed from, if any."
    )
    checkpoint_step: int | None = Field(
        default=None, description="Step of the last checkpoint this run saved."
    )
    eta_s: int | None = None  # seconds left, where the job object estimates them
    checkpoint_path: str | None = Field(
        default=None, description="Where the last checkpoint this run saved is."
    )
    run_dir: str | None = Field(default=None, description="Local target: the job's directory.")
    log_path: str | None = None
    exit_code: int | None = None
    elapsed_s: float | None = None
    restarts: int | None = Field(default=None, description="Times the scheduler restarted the job.")
    error: dict[str, Any] | None = Field(
        default=None, description="The trainer's error line, when it reported one."
    )
    message: str | None = Field(
        default=None, description="How a run that did not succeed ended, in one line."
    )
    log_tail: str | None = Field(default=None, description="Last log lines of a failed run.")
    loss_sparkline: str | None = Field(default=None, description="The loss so far, one line.")
    gpu: dict[str, Any] | None = Field(
        default=None, description="The ranks' GPUs (NVML) in the last log window."
    )
    tracking: dict[str, str] | None = Field(
        default=None, description="Where the run is tracked: TensorBoard dir, MLflow and W&B runs."
    )
    next_step: NextStep | None = Field(default=None, description="The call to make next.")
    hint: str | None = Field(default=None, description="What to do that is not one call.")
    pods: dict[str, str] | None = Field(default=None, description="Cluster targets: pod -> phase.")
    pod_usage: dict[str, Any] | None = Field(
        default=None, description="Kubernetes: the pods' CPU and memory (metrics API), summed up."
    )
    conditions: list[str] | None = Field(
        default=None, description="Cluster targets: the job's true conditions, in order."
    )
    warnings: list[str] = Field(
        default_factory=list, description="What did not stop the job but may slow it."
    )
    findings: list[WatchFinding] = Field(
        default_factory=list, description="Straggler, slowdown or hang seen in its steps."
    )

    def suggest_next_step(self, target_args: dict[str, Any]) -> None:
        """next_step for a running job (follow it) or a failed one (its log), and a hint
        for one that may resume; `target_args` are the job tools' flat target arguments
        (Target.call_args())."""
        job = {"job_name": self.job_name, **target_args}
        if self.status in ("preempted", "cancelled", "failed") and self.checkpoint_step:
            self.hint = (
                "deploy_training_job with the same parameters (runs_dir, checkpoint_dir; "
                f"kubernetes: replace=true) resumes from step {self.checkpoint_step}."
            )
        if self.status == "failed":
            self.next_step = NextStep(
                tool="get_training_job_logs",
                arguments={**job, "tail_lines": 200},
                why="read the end of its log",
            )
        elif self.status == "running":
            self.next_step = NextStep(
                tool="get_training_job",
                arguments={**job, "wait_seconds": POLL_WAIT_S},
                why="follow it (cancel_training_job with confirm=true stops it)",
            )

    def summary_rows(self) -> list[tuple[str, Any]]:
        rows: list[tuple[str, Any]] = [("job", self.job_name), ("status", self.status)]
        if self.max_steps:
            rows.append(("steps", f"{self.steps}/{self.max_steps}"))
        if self.first_loss is not None and self.last_loss is not None:
            curve = f"  {self.loss_sparkline}" if self.loss_sparkline else ""
            rows.append(("loss", f"{self.first_loss:.4f} -> {self.last_loss:.4f}{curve}"))
        if self.last_eval_loss is not None:
            rows.append(("eval loss", f"{self.last_eval_loss:.4f}"))
        if self.tokens_per_s:
            rows.append(("tokens/s", f"{self.tokens_per_s:,.0f}"))
        if self.resumed_from is not None:
            rows.append(("resumed from", f"step {self.resumed_from}"))
        if self.checkpoint_path:
            at = "" if self.checkpoint_step is None else f"step {self.checkpoint_step}: "
            rows.append(("checkpoint", at + self.checkpoint_path))
        if self.elapsed_s is not None:
            rows.append(("elapsed", f"{self.elapsed_s:.1f} s"))
        if self.run_dir:
            rows.append(("run dir", self.run_dir))
        rows += [(f"tracked ({tool})", where) for tool, where in (self.tracking or {}).items()]
        if self.gpu:
            rows.append(("gpus", gpu_text(self.gpu)))
        if self.pods:
            rows.append(("pods", ", ".join(f"{k} {v}" for k, v in self.pods.items())))
        if self.pod_usage:
            rows.append(("pod use", usage_text(self.pod_usage)))
        if self.restarts:
            rows.append(("restarts", self.restarts))
        rows += [("warning", w) for w in self.warnings]
        rows += [(f.code, f"{f.message}\n  -> {f.hint}") for f in self.findings]
        rows.append(("log", self.log_path or "-"))
        if self.message:
            rows.append(("outcome", self.message))
        if self.error:
            rows.append(("error", f"{self.error.get('error_type')}: {self.error.get('message')}"))
        if self.log_tail and self.status == "failed":
            rows.append(("log tail", "\n" + self.log_tail))
        if self.hint:
            rows.append(("hint", self.hint))
        return rows

    def job_failure(self) -> ToolFailure | None:
        """A failed job as a failure (the tools that run it answer with it)."""
        if self.status != "failed":
            return None
        error = self.error or {}
        said = f"{error.get('error_type')}: {error.get('message')}" if error else self.message
        return ToolFailure(
            ErrorCode.JOB_FAILED,
            f"Job {self.job_name!r} failed" + (f": {said}" if said else "."),
            self.hint or self._failure_hint(error),
            {"job_name": self.job_name, "target": self.target},
            self.next_step,
        )

    def _failure_hint(self, error: dict[str, Any]) -> str:
        """What to do next, by what the target's tools can do: the pod doctor reads a
        cluster's pods; on this host or Slurm the error line and the log say it all."""
        if self.target == "kubernetes":
            return (
                "diagnose_training_job names the cause and its fix; the result's log_tail "
                "holds the last lines."
            )
        if error.get("retryable") is False:
            return (
                "Change what the error names and deploy again (the same job fails the same "
                "way); the result's log_tail holds the last lines."
            )
        return (
            "The result's log_tail holds the last lines (get_training_job_logs more); "
            "auto_retry=true diagnoses a failure and resubmits with a fix."
        )

    def cli_exit_status(self) -> int:
        return 1 if self.status in ("failed", "preempted", "cancelled") else 0


def gpu_text(gpu: dict[str, Any]) -> str:
    """The last log window's GPU fields in one line."""
    parts = []
    if "gpu_util_mean" in gpu:
        low = f", lowest {gpu.get('gpu_util_min')}% (rank {gpu.get('gpu_util_min_rank')})"
        parts.append(f"util {gpu['gpu_util_mean']}%{low}")
    if "gpu_mem_used_mb_max" in gpu:
        parts.append(
            f"mem {gpu['gpu_mem_used_mb_max']:.0f}/{gpu.get('gpu_mem_total_mb', 0):.0f} MiB"
        )
    for key, unit in (("gpu_power_w_max", "W"), ("gpu_temp_c_max", "C")):
        if key in gpu:
            parts.append(f"max {gpu[key]:.0f} {unit}")
    if gpu.get("gpu_throttled"):
        parts.append(f"throttled {gpu['gpu_throttled']}")
    if gpu.get("gpu_xid"):
        parts.append(f"XID {gpu['gpu_xid']}")
    return ", ".join(parts)


class RetryAttempt(BaseModel):
    """One submission of an auto-retry run: its root finding and the remedy applied after."""

    number: int
    status: str
    code: str | None = None
    pod: str | None = None
    rank: int | None = None
    evidence: list[str] = Field(default_factory=list)
    retryable: bool | None = None
    fix: str | None = None
    remedy: str | None = None
    spec_diff: list[str] = Field(default_factory=list)
    resumed_from: int | None = None
    checkpoint_step: int | None = None
    quarantined: list[str] = Field(
        default_factory=list, description="Nodes cordoned and tainted after this attempt."
    )


class JobLogs(ToolResult):
    job_name: str
    target: str
    log_path: str
    lines: int = Field(description="How many lines `text` holds (a cut line counts as one).")
    tail_lines: int = Field(description="How many lines were asked for.")
    excerpt: str | None = Field(
        default=None, description="Set when `text` holds fewer lines than asked: why."
    )
    next_step: NextStep | None = Field(default=None, description="The call for the earlier lines.")
    text: str = Field(description="The last lines of the job's log, secrets masked.")

    def plain_text(self) -> str:
        """The log itself; an excerpt marked on its first line, with the call for the rest."""
        if self.excerpt is None:
            return self.text
        rest = f"; the earlier lines: {self.next_step.text()}" if self.next_step else ""
        return f"(an excerpt: {self.excerpt}{rest})\n{self.text}"

    def left_out_over_mcp(self) -> set[str]:
        # The log is the text content; structuredContent says what it is, not it again.
        return {"text"}
