"""A Kubernetes job's state from one poll's reads (the job, its pods, their events, what
rank 0's log or the job object says of the run): its status (preempted, cancelled, why a
running job waits), its progress and the pods' account."""

from __future__ import annotations

import dataclasses
from typing import Any

from skills.kube import pods as kube_pods
from skills.kube.pods import pod_name, why_pod_waits
from skills.shared.secrets import redact
from skills.training_job_deployer.models import JobState
from skills.training_job_deployer.targets.kubernetes.engine import Engine, commanded_max_steps
from skills.training_job_deployer.targets.kubernetes.pod_logs import pod_path
from skills.training_job_deployer.targets.kubernetes.pytorchjob import PyTorchJobEngine
from skills.training_job_deployer.trainer_log import EXIT_PREEMPTED, RunMetrics, tail_with_error


def job_state(
    target: str,
    engine: Engine,
    namespace: str,
    job_name: str,
    job: dict[str, Any],
    pods: list[dict[str, Any]],
    events: list[dict[str, Any]],
    metrics: RunMetrics,
    log: str,
) -> JobState:
    """The job's state from its object, its pods and events, the run's metrics and the
    end of rank 0's log (the tail of a failed job); no next step yet."""
    status = kube_pods.job_status(job)
    rank0 = pods[0] if pods else None
    code = kube_pods.exit_code(rank0) if rank0 else None
    condition = kube_pods.current_condition(job)
    message = None
    if status == "failed" and (metrics.preempted is not None or code == EXIT_PREEMPTED):
        status = "preempted"
    if status in ("failed", "preempted"):
        # The trainer's account first; the operator's condition when it gave none.
        message = metrics.outcome(code)
        if message is None:
            said = condition.message if condition and condition.message else "no reason given"
            message = f"failed: {said}"
    elif status == "cancelled":
        message = "cancelled (suspended: pods removed, checkpoints kept)"
    elif status == "running":
        message = waiting_reason(pods, events, engine.controller)
    max_steps = metrics.max_steps or commanded_max_steps(engine, job)
    state = JobState(
        job_name=job_name,
        target=target,
        engine=engine.name,
        status=status,  # type: ignore[arg-type]
        **{**metrics.state_fields(), "max_steps": max_steps},
        eta_s=engine.eta_s(job) if status == "running" else None,
        log_path=pod_path(pod_name(rank0), namespace) if rank0 else None,
        exit_code=code,
        message=None if message is None else redact(message),
        restarts=kube_pods.restarts(pods),
        pods={pod_name(p): (p.get("status") or {}).get("phase", "Unknown") for p in pods},
        conditions=[
            str(c.get("type"))
            for c in (job.get("status") or {}).get("conditions") or []
            if c.get("status") == "True"
        ],
    )
    if status in ("failed", "preempted"):
        state.log_tail = tail_with_error(log, state.error)
    return state


def waiting_reason(
    pods: list[dict[str, Any]],
    events: list[dict[str, Any]],
    controller: str = PyTorchJobEngine.controller,
) -> str | None:
    """Why a running job is not training yet: what a pod waits for (skills.kube.pods),
    or the newest Warning event (FailedScheduling, ...)."""
    for pod in pods:
        if reason := why_pod_waits(pod):
            return reason
    warnings = [e for e in events if e.get("type") == "Warning"]
    if warnings:
        last = warnings[-1]
        return f"{last.get('reason')}: {last.get('message', '')}".strip()
    if not pods:
        return f"waiting for {controller} to create the pods"
    return None


def not_started(pod: dict[str, Any]) -> bool:
    """A pod that is not running yet (what its events would say why)."""
    return (pod.get("status") or {}).get("phase") in (None, "Pending", "Unknown")


def posted_over(logged: RunMetrics, posted: RunMetrics | None) -> RunMetrics:
    """The log's account of a run with what the trainer posted on the job object (steps,
    loss, tokens/s, max_steps) in place of the log's, where it posted them."""
    if posted is None:
        return logged
    found = {
        "steps": posted.steps or logged.steps,
        "last_loss": posted.last_loss if posted.last_loss is not None else logged.last_loss,
        "tokens_per_s": posted.tokens_per_s or logged.tokens_per_s,
        "max_steps": posted.max_steps or logged.max_steps,
    }
    return dataclasses.replace(logged, **found)
