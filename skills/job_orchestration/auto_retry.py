"""Auto-retry: submit -> follow -> on failure snapshot, diagnose, decide -> apply the
remedy -> resubmit, up to `max_retries` resubmissions.

    result = run(spec, settings, max_retries=3, progress=progress)   # a DeployResult

Each resubmission replaces the failed job (same name, same checkpoint location), so the
trainer resumes from the newest complete checkpoint. A permanent finding stops at once
(its fix in `stop_reason`); the crash-loop breaker (remedies.decide) stops a finding that
comes back after its remedy with nothing new to try. A job that never fails but cannot
start (an image pull refused, a missing Secret, no GPUs free for long) counts as failed
once the pod doctor names a cause for it (the job is cancelled then: suspended). A job
the watchdog finds hung (no step for several step times: training_job_deployer/
watchdog.py) is stopped (SIGTERM, SIGKILL after HUNG_GRACE_S) and resubmitted. The
result lists every attempt: finding (code, pod, rank, evidence), remedy, spec diff,
resumed-from step. Evidence is masked by the
pod doctor; logs and snapshots never enter the result.

Only targets with Capability.AUTO_RETRY take part: their `snapshot(job_name)` is the
doctor's input and their `retry_facts()` (free GPUs, the newest image) informs the
remedies. The loop knows no target by name: remedy settings apply to whatever settings
model has the field (`env` names map to lower-cased fields: NCCL_SOCKET_IFNAME ->
nccl_socket_ifname).
"""

from __future__ import annotations

import time
from typing import Any

from skills.job_doctor.diagnose import Finding, diagnose
from skills.job_doctor.failure_signatures import CODES
from skills.job_doctor.remedies import Attempt, Remedy, decide, facts_from_snapshot
from skills.kube.pods import pod_name
from skills.shared.progress import NullProgress, Progress
from skills.training_job_deployer.job_spec import JobSpec
from skills.training_job_deployer.models import TERMINAL, JobState, RetryAttempt, WatchFinding
from skills.training_job_deployer.targets.base import Capability, Target, TargetSettings
from skills.training_job_deployer.targets.by_name import get_target

FOLLOW_CHUNK_S = 4.0  # follow this long, then look at a job that is not training yet
# A hung job is stopped with this grace: a rank stuck in a collective cannot save.
HUNG_GRACE_S = 10.0
# Causes that keep pods from starting without failing the job, and how long each may
# last before the attempt counts as failed (the autoscaler may still add nodes).
STUCK_AFTER_S = {
    "image_pull_auth": 0.0,
    "image_not_found": 0.0,
    "image_platform_mismatch": 0.0,
    "missing_secret": 0.0,
    "insufficient_gpu": 600.0,
    "insufficient_efa": 600.0,
}


def supports(runner: Target) -> bool:
    return runner.can(Capability.AUTO_RETRY)


def require_support(runner: Target) -> None:
    """unsupported_for_target for a target the job doctor cannot read."""
    runner.require(Capability.AUTO_RETRY, field="auto_retry")


def run(
    spec: JobSpec,
    settings: TargetSettings,
    *,
    max_retries: int,
    progress: Progress | None = None,
    replace_corrupt_record: bool = False,
) -> dict[str, Any]:
    """The loop. Returns the DeployResult fields of the last attempt plus `attempts` and
    `stop_reason` (None when the job succeeded)."""
    progress = progress or NullProgress()
    attempts: list[RetryAttempt] = []
    history: list[Attempt] = []
    stop: str | None = None
    state: JobState | None = None  # each attempt's; the loop runs at least once
    next_step: dict[str, Any] | None = None  # a stop's own next call (add a node)
    avoid: list[str] = []  # nodes quarantined so far: the next attempts keep off them
    plan: Any = None
    for number in range(1, max_retries + 2):
        runner = get_target(settings)
        require_support(runner)
        plan = runner.plan(spec)
        if avoid:  # nodes quarantined after an earlier attempt
            plan = runner.avoiding(plan, tuple(avoid))
        progress.report(0, spec.max_steps, f"attempt {number}: submitting {spec.job_name}")
        runner.submit(spec.job_name, plan, replace_corrupt_record=replace_corrupt_record)
        state, snapshot, finding = _follow(runner, spec.job_name, progress)
        attempt = RetryAttempt(
            number=number,
            status=state.status,
            resumed_from=state.resumed_from,
            checkpoint_step=state.checkpoint_step,
        )
        attempts.append(attempt)
        if state.status in ("succeeded", "cancelled"):
            stop = None if state.status == "succeeded" else "cancelled"
            break
        if snapshot is None:
            snapshot = runner.snapshot(spec.job_name)
            finding = diagnose(snapshot).root
        _describe(attempt, finding)
        progress.report(state.steps, spec.max_steps, f"attempt {number}: {_said(finding)}")
        known = runner.retry_facts()
        facts = facts_from_snapshot(snapshot, **known)
        decision = decide(finding, spec, history, facts)
        history.append(
            Attempt(
                number=number,
                finding=finding,
                remedy=decision.remedy,
                resumed_from=state.resumed_from,
            )
        )
        short = _quarantine(runner, attempt, finding, snapshot, spec)
        avoid += [n for n in attempt.quarantined if n not in avoid]
        if short is not None:
            stop, next_step = short
            break
        if decision.stop:
            stop = decision.stop
            break
        fix = decision.remedy
        assert fix is not None
        if number > max_retries:
            stop = f"max_retries ({max_retries}) used up; the next remedy: {fix.step}"
            break
        settings, why_not = _apply(fix, settings)
        if why_not:
            stop = why_not
            break
        attempt.remedy = f"{fix.step}: {fix.description}"
        attempt.spec_diff = list(fix.diff)
        spec = fix.spec
        progress.report(state.steps, spec.max_steps, f"attempt {number}: {attempt.remedy}")
    # The last attempt's state, with the whole run's account.
    assert state is not None  # max_retries >= 0 (the tool's input model): one attempt ran
    fields = state.model_dump()
    fields.update(attempts=attempts, stop_reason=stop, plan=plan)
    if stop:
        fields["next_step"] = next_step
        fields["message"] = f"auto-retry stopped: {stop}"
    return fields


def _quarantine(
    runner: Target,
    attempt: RetryAttempt,
    finding: Finding | None,
    snapshot: dict[str, Any],
    spec: JobSpec,
) -> tuple[str, dict[str, Any] | None] | None:
    """A finding that is the node's fault (CODES[code].quarantine) takes the nodes it was
    seen on out of service, only nodes that ran this job's pods (attempt.quarantined
    lists them); (why the loop stops, the call that adds a node) when too few nodes are
    left for the job, else None."""
    if finding is None or not CODES[finding.code].quarantine:
        return None
    if not runner.can(Capability.QUARANTINE):
        return None
    ran = {pod_name(p): (p.get("spec") or {}).get("nodeName") for p in snapshot.get("pods") or []}
    seen = [finding.pod, *finding.alike_pods]
    nodes = sorted({str(node) for p in seen if p and (node := ran.get(p))})
    if not nodes:
        return None
    done = runner.quarantine(nodes, finding.code, spec.job_name, spec.num_nodes)
    attempt.quarantined = list(done.nodes)
    if done.short is None:
        return None
    return f"quarantined {', '.join(done.nodes)}; {done.short}", done.next_step


def _follow(
    runner: Target, job_name: str, progress: Progress
) -> tuple[JobState, dict[str, Any] | None, Finding | None]:
    """Follow until the job ends, or until a cause keeps its pods from starting for
    longer than STUCK_AFTER_S allows, or the watchdog finds it hung (then it is stopped,
    and the snapshot and finding come back too)."""
    first_seen: dict[str, float] = {}
    while True:
        state = runner.follow(job_name, progress, FOLLOW_CHUNK_S)
        if state.status in TERMINAL:
            return state, None, None
        hung = next((f for f in state.findings if f.code == "job_hung"), None)
        if hung is not None:
            return _stop_hung(runner, job_name, state, hung)
        if state.steps or not state.message:
            first_seen.clear()
            continue
        snapshot = runner.snapshot(job_name)
        root = diagnose(snapshot).root
        if root is None or root.role != "cause" or root.code not in STUCK_AFTER_S:
            first_seen.clear()
            continue
        since = first_seen.setdefault(root.code, time.monotonic())
        if time.monotonic() - since >= STUCK_AFTER_S[root.code]:
            runner.cancel(job_name)  # it would hold its place (and start later) otherwise
            state.status = "failed"
            state.message = f"not starting (suspended): {root.one_line()}"
            return state, snapshot, root


def _stop_hung(
    runner: Target, job_name: str, state: JobState, hung: WatchFinding
) -> tuple[JobState, dict[str, Any], Finding]:
    """A hung job holds its GPUs doing nothing: stop it (SIGTERM, then SIGKILL of the
    whole process group after HUNG_GRACE_S; a stuck rank cannot checkpoint), and
    return it as failed, with the watchdog's finding as the doctor's."""
    runner.cancel(job_name, grace_s=HUNG_GRACE_S)
    meaning = CODES[hung.code]
    finding = Finding(
        code=hung.code,
        process_rank=hung.rank,
        evidence=[hung.message],
        root_cause=meaning.root_cause,
        remediation=meaning.remediation,
        retryable=meaning.retryable,
    )
    state.status = "failed"
    state.message = f"hung (stopped): {hung.message}"
    return state, runner.snapshot(job_name), finding


def _apply(fix: Remedy, settings: TargetSettings) -> tuple[TargetSettings, str | None]:
    """The settings for the next attempt (replace=true: the failed job goes first), or why
    the remedy cannot be applied here (a rebuild, a setting this target lacks)."""
    if fix.action == "rebuild_image":
        return settings, f"{fix.code} needs a new image: {fix.description}"
    changes: dict[str, Any] = {}
    for key, value in fix.settings.items():
        if key == "env" and isinstance(value, dict):
            for name, text in value.items():
                changes[str(name).lower()] = text
        else:
            changes[key] = value
    fields = type(settings).model_fields
    missing = sorted(k for k in changes if k not in fields)
    if missing:
        target = getattr(settings, "target", type(settings).__name__)
        return settings, (
            f"{fix.step} needs {', '.join(missing)}, which target={target!r} cannot set: "
            f"{fix.description}"
        )
    if "replace" in fields:
        changes["replace"] = True
    new = type(settings).model_validate({**settings.model_dump(), **changes})
    return new, None


def _describe(attempt: RetryAttempt, finding: Finding | None) -> None:
    if finding is None:
        return
    attempt.code = finding.code
    attempt.pod = finding.pod
    attempt.rank = finding.rank
    attempt.evidence = finding.evidence
    attempt.retryable = finding.retryable
    attempt.fix = finding.remediation


def _said(finding: Finding | None) -> str:
    return finding.one_line() if finding else "failed with no known failure signature"


__all__ = ["require_support", "run", "supports"]
