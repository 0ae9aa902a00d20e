"""What to change after a failure, as pure functions: the auto-retry loop is a thin
caller of `decide` (or of `remedy` and `breaker`).

    decision = decide(diagnosis.root, spec, history, facts)
    if decision.stop: report(decision.stop)                      # permanent, loop, none
    else: resubmit(decision.remedy.spec, decision.remedy.settings)   # resume from ckpt

A remedy is the next rung of its code's ladder that the attempts so far have not
applied (cuda_oom: halve train_batch_size and double grad_accum_steps, then activation
checkpointing, then CPU offload). It carries the new JobSpec (validated), target-setting
changes for what the JobSpec does not hold (`settings`: shm_size_gib, env, image_uri,
efa_per_node), or the build_image call that fixes the image, and a human diff.
Permanent codes (failure_signatures.CODES[code].retryable is False) never get one.

`facts` are what the loop knows of the cluster and the current settings (free GPUs per
node, the newest pushed image, the instance type, ...); `facts_from_snapshot` reads
those a snapshot holds. Nothing here calls a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from skills.catalog.instances import instance_spec
from skills.job_doctor.diagnose import Finding, Snapshot, validate_snapshot
from skills.job_doctor.failure_signatures import CODES
from skills.shared.errors import ToolFailure
from skills.shared.next_step import command_name
from skills.training_job_deployer.job_spec import JobSpec

# The trainer's defaults, for a JobSpec that leaves these to it (trainer/config.py).
TRAINER_BATCH_SIZE = 8
TRAINER_GRAD_ACCUM = 1
# NCCL on EKS: keep off the interfaces that do not route between nodes.
NCCL_SOCKET_IFNAME = "^lo,docker,veth,eni,pod-id-link0"
DEFAULT_SHM_GIB = 16
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")

Action = Literal["resubmit", "edit_spec", "settings", "rebuild_image"]


class Remedy(BaseModel):
    code: str
    step: str = Field(description="The ladder rung, e.g. cuda_oom/halve_batch.")
    action: Action
    spec: JobSpec = Field(description="The JobSpec to submit next (unchanged but for diff).")
    settings: dict[str, Any] = Field(
        default_factory=dict, description="Target-setting changes the JobSpec does not hold."
    )
    build_image: dict[str, Any] | None = Field(
        default=None, description="The build_image arguments that fix the image."
    )
    diff: list[str] = Field(default_factory=list, description="What changes, one line each.")
    description: str
    # An outside event (a preemption) may happen again: repeating it is not a crash loop.
    repeatable: bool = False


class Attempt(BaseModel):
    """One submission in an auto-retry run, as its result lists it."""

    number: int
    finding: Finding | None = Field(default=None, description="Its root finding (None: none).")
    remedy: Remedy | None = Field(default=None, description="What was applied after it.")
    resumed_from: int | None = Field(default=None, description="Checkpoint step it resumed.")

    @property
    def spec_diff(self) -> list[str]:
        return self.remedy.diff if self.remedy else []


@dataclass(frozen=True)
class Facts:
    """What the caller knows beyond the JobSpec. None: not known (the rung that needs it
    is skipped)."""

    elastic: bool = False
    min_nodes: int = 1
    free_gpus: tuple[int, ...] | None = None  # free nvidia.com/gpu per schedulable node
    image: str | None = None
    newest_image: str | None = None  # the newest image that exists in the registry
    instance_type: str | None = None
    driver_version: str | None = None
    shm_size_gib: float | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    dockerfile: str | None = None


@dataclass(frozen=True)
class Decision:
    remedy: Remedy | None
    stop: str | None  # why the loop stops (None: apply the remedy and resubmit)


# --- the ladders --------------------------------------------------------------------------


def _edit(spec: JobSpec, **changes: Any) -> tuple[JobSpec, list[str]]:
    """A validated copy with `changes`, and the diff lines of what really changed."""
    new = JobSpec.model_validate({**spec.model_dump(), **changes})
    diff = [
        f"{name}: {_shown(getattr(spec, name))} -> {_shown(getattr(new, name))}"
        for name in changes
        if getattr(spec, name) != getattr(new, name)
    ]
    return new, diff


def _shown(value: Any) -> str:
    return "(trainer default)" if value is None else str(value)


def _oom(spec: JobSpec, facts: Facts, done: set[str]) -> Remedy | None:
    batch = spec.train_batch_size or TRAINER_BATCH_SIZE
    accum = spec.grad_accum_steps or TRAINER_GRAD_ACCUM
    if "cuda_oom/halve_batch" not in done and batch >= 2 and batch % 2 == 0:
        new, diff = _edit(spec, train_batch_size=batch // 2, grad_accum_steps=accum * 2)
        return Remedy(
            code="cuda_oom",
            step="cuda_oom/halve_batch",
            action="edit_spec",
            spec=new,
            diff=diff,
            description=f"halve the micro-batch ({batch} -> {batch // 2}) and double gradient "
            f"accumulation ({accum} -> {accum * 2}): the same global batch in less memory",
        )
    if "cuda_oom/activation_checkpointing" not in done and spec.activation_checkpointing != "full":
        new, diff = _edit(spec, activation_checkpointing="full")
        return Remedy(
            code="cuda_oom",
            step="cuda_oom/activation_checkpointing",
            action="edit_spec",
            spec=new,
            diff=diff,
            description="recompute activations in the backward pass (full activation "
            "checkpointing)",
        )
    if "cuda_oom/cpu_offload" not in done and not spec.cpu_offload:
        new, diff = _edit(spec, cpu_offload=True)
        return Remedy(
            code="cuda_oom",
            step="cuda_oom/cpu_offload",
            action="edit_spec",
            spec=new,
            diff=diff,
            description="keep parameters, gradients and optimizer state on the CPU",
        )
    return None


def _insufficient_gpu(spec: JobSpec, facts: Facts, done: set[str]) -> Remedy | None:
    if not facts.elastic or not facts.free_gpus or "insufficient_gpu/shrink" in done:
        return None
    free = sorted(facts.free_gpus, reverse=True)
    fitting = sum(1 for f in free if f >= spec.gpu_per_node)
    changes: dict[str, int] = {}
    if max(1, facts.min_nodes) <= fitting < spec.num_nodes:
        changes["num_nodes"] = fitting  # fewer nodes, each as asked
    elif len(free) >= spec.num_nodes and 1 <= free[spec.num_nodes - 1] < spec.gpu_per_node:
        changes["gpu_per_node"] = free[spec.num_nodes - 1]  # as many nodes, fewer GPUs each
    if not changes:
        return None
    new, diff = _edit(spec, **changes)
    return Remedy(
        code="insufficient_gpu",
        step="insufficient_gpu/shrink",
        action="edit_spec",
        spec=new,
        diff=diff,
        description="shrink the elastic job to the GPUs that are free now "
        f"({new.num_nodes} x {new.gpu_per_node})",
    )


def _insufficient_efa(spec: JobSpec, facts: Facts, done: set[str]) -> Remedy | None:
    if not facts.instance_type or "insufficient_efa/instance_count" in done:
        return None

    try:
        instance = instance_spec(facts.instance_type)
    except ToolFailure:
        return None
    if instance.efa_devices is None:
        return None
    return Remedy(
        code="insufficient_efa",
        step="insufficient_efa/instance_count",
        action="settings",
        spec=spec,
        settings={"efa_per_node": instance.efa_devices},
        diff=[f"efa_per_node: -> {instance.efa_devices} ({instance.name})"],
        description=f"request the {instance.name}'s EFA device count",
    )


def _image_not_found(spec: JobSpec, facts: Facts, done: set[str]) -> Remedy | None:
    newest = facts.newest_image
    if not newest or newest == facts.image or "image_not_found/newest_tag" in done:
        return None
    return Remedy(
        code="image_not_found",
        step="image_not_found/newest_tag",
        action="settings",
        spec=spec,
        settings={"image_uri": newest},
        diff=[f"image_uri: {facts.image or '(unknown)'} -> {newest}"],
        description="use the newest image that exists in the registry",
    )


def _shm(spec: JobSpec, facts: Facts, done: set[str]) -> Remedy | None:
    if "shm_too_small/larger_shm" in done:
        return None
    size = max(DEFAULT_SHM_GIB, int((facts.shm_size_gib or 0) * 2))
    was = f"{facts.shm_size_gib:g} GiB" if facts.shm_size_gib else "container default (64 MB)"
    return Remedy(
        code="shm_too_small",
        step="shm_too_small/larger_shm",
        action="settings",
        spec=spec,
        settings={"shm_size_gib": size},
        diff=[f"/dev/shm: {was} -> {size} GiB (emptyDir, medium Memory)"],
        description="mount a larger memory-backed /dev/shm",
    )


def _nccl(spec: JobSpec, facts: Facts, done: set[str]) -> Remedy | None:
    if "nccl_connect/socket_ifname" in done or facts.env.get("NCCL_SOCKET_IFNAME"):
        return None
    return Remedy(
        code="nccl_connect",
        step="nccl_connect/socket_ifname",
        action="settings",
        spec=spec,
        settings={"env": {"NCCL_SOCKET_IFNAME": NCCL_SOCKET_IFNAME}},
        diff=[f"env NCCL_SOCKET_IFNAME: (unset) -> {NCCL_SOCKET_IFNAME}"],
        description="keep NCCL off interfaces that do not route between nodes (if it fails "
        "again, allow all traffic within the nodes' security group)",
    )


def _rebuild(code: str):
    def ladder(spec: JobSpec, facts: Facts, done: set[str]) -> Remedy | None:
        step = f"{code}/rebuild_image"
        if step in done or not (facts.instance_type or facts.driver_version):
            return None
        call: dict[str, Any] = {"dockerfile": facts.dockerfile or "Dockerfile"}
        if facts.instance_type:
            call["instance_type"] = facts.instance_type
        if facts.driver_version:
            call["driver_version"] = facts.driver_version
        shown = " ".join(f"--{k} {v}" for k, v in call.items())
        return Remedy(
            code=code,
            step=step,
            action="rebuild_image",
            spec=spec,
            build_image=call,
            diff=[f"image: rebuilt by build_image {shown}"],
            description="rebuild the image on a CUDA the nodes can run: "
            f"{command_name('build_image')} {shown}",
        )

    return ladder


def _resubmit(code: str, *, repeatable: bool = False):
    def ladder(spec: JobSpec, facts: Facts, done: set[str]) -> Remedy | None:
        step = f"{code}/resubmit"
        if step in done and not repeatable:
            return None
        return Remedy(
            code=code,
            step=step,
            action="resubmit",
            spec=spec,
            diff=[],
            description="resubmit as is, resuming from the newest complete checkpoint",
            repeatable=repeatable,
        )

    return ladder


LADDERS = {
    "cuda_oom": _oom,
    "insufficient_gpu": _insufficient_gpu,
    "insufficient_efa": _insufficient_efa,
    "image_not_found": _image_not_found,
    "shm_too_small": _shm,
    "nccl_connect": _nccl,
    "cuda_driver_too_old": _rebuild("cuda_driver_too_old"),
    "cuda_arch_unsupported": _rebuild("cuda_arch_unsupported"),
    "preempted": _resubmit("preempted", repeatable=True),
    "rendezvous_timeout": _resubmit("rendezvous_timeout"),
    "rendezvous_closed": _resubmit("rendezvous_closed"),
    "collective_timeout": _resubmit("collective_timeout"),
    # On other nodes: auto_retry quarantines the failed one first (auto_retry.py). Another
    # node may fail later in a long run: not a crash loop.
    "gpu_hardware_fault": _resubmit("gpu_hardware_fault", repeatable=True),
    "efa_error": _resubmit("efa_error"),
    # Stopped by auto-retry (auto_retry.py), resumed from its newest checkpoint.
    "job_hung": _resubmit("job_hung"),
}


def applied_steps(history: Sequence[Attempt]) -> set[str]:
    return {a.remedy.step for a in history if a.remedy is not None}


def remedy(
    finding: Finding,
    spec: JobSpec,
    attempt_history: Sequence[Attempt] = (),
    facts: Facts | None = None,
) -> Remedy | None:
    """The next rung of the finding's ladder not yet applied, or None (a permanent code,
    no ladder, the ladder used up, or a fact it needs not known)."""
    if not CODES[finding.code].retryable or finding.code not in LADDERS:
        return None
    return LADDERS[finding.code](spec, facts or Facts(), applied_steps(attempt_history))


def breaker(
    finding: Finding, attempt_history: Sequence[Attempt], next_remedy: Remedy | None = None
) -> str | None:
    """Why the loop must stop: the same finding came back after its remedy and nothing new
    is left to try (a remedy that is repeatable, a preemption, does not count)."""
    last = attempt_history[-1] if attempt_history else None
    if last is None or last.finding is None or last.remedy is None:
        return None
    if last.finding.code != finding.code:
        return None
    if next_remedy is not None and (next_remedy.step != last.remedy.step or next_remedy.repeatable):
        return None
    return (
        f"crash loop: {finding.code} again after {last.remedy.step} (attempt {last.number}); "
        "stopping instead of retrying the same failure"
    )


def decide(
    finding: Finding | None,
    spec: JobSpec,
    attempt_history: Sequence[Attempt] = (),
    facts: Facts | None = None,
) -> Decision:
    """The loop's one call per failed attempt: a remedy to apply, or why to stop."""
    if finding is None:
        return Decision(None, "no known failure signature: nothing to remedy")
    if not finding.retryable:
        return Decision(None, f"{finding.code} is permanent: {finding.remediation}")
    fix = remedy(finding, spec, attempt_history, facts)
    stop = breaker(finding, attempt_history, fix)
    if stop:
        return Decision(None, stop)
    if fix is None:
        return Decision(None, f"no automatic remedy left for {finding.code}: {finding.remediation}")
    return Decision(fix, None)


def facts_from_snapshot(snapshot: Mapping[str, Any] | Snapshot, **known: Any) -> Facts:
    """The facts a snapshot holds (image, instance type, /dev/shm size, NCCL env, elastic),
    merged with `known` (free_gpus, newest_image, driver_version, ... from the caller)."""
    snap = snapshot if isinstance(snapshot, Snapshot) else validate_snapshot(snapshot)
    found: dict[str, Any] = {}
    spec = (snap.job or {}).get("spec") or {}
    elastic = spec.get("elasticPolicy") if isinstance(spec, dict) else None
    if isinstance(elastic, dict):
        found["elastic"] = True
        if isinstance(elastic.get("minReplicas"), int):
            found["min_nodes"] = elastic["minReplicas"]
    for pod in snap.pods:
        pod_spec = raw if isinstance(raw := pod.get("spec"), dict) else {}
        selector = pod_spec.get("nodeSelector") or {}
        for label in INSTANCE_TYPE_LABELS:
            if isinstance(selector, dict) and isinstance(selector.get(label), str):
                found.setdefault("instance_type", selector[label])
        shm_volumes = set()
        for volume in pod_spec.get("volumes") or []:
            empty = volume.get("emptyDir") if isinstance(volume, dict) else None
            if isinstance(empty, dict) and empty.get("medium") == "Memory":
                shm_volumes.add(volume.get("name"))
                size = _gib(empty.get("sizeLimit"))
                if size is not None:
                    found.setdefault("shm_size_gib", size)
        for container in pod_spec.get("containers") or []:
            if not isinstance(container, dict):
                continue
            if isinstance(container.get("image"), str):
                found.setdefault("image", container["image"])
            env = {
                e.get("name"): e.get("value")
                for e in container.get("env") or []
                if isinstance(e, dict) and isinstance(e.get("value"), str)
            }
            nccl = {k: v for k, v in env.items() if isinstance(k, str) and k.startswith("NCCL_")}
            if nccl:
                found.setdefault("env", nccl)
    return Facts(**{**found, **known})


_UNITS = {
    "Ki": 2**-20,
    "Mi": 2**-10,
    "Gi": 1,
    "Ti": 2**10,
    "K": 1e3 / 2**30,
    "M": 1e6 / 2**30,
    "G": 1e9 / 2**30,
    "T": 1e12 / 2**30,
}


def _gib(quantity: Any) -> float | None:
    """A Kubernetes quantity ("16Gi", "512Mi", "1e9") in GiB."""
    if not isinstance(quantity, str) or not quantity:
        return None
    unit = next((u for u in _UNITS if quantity.endswith(u)), "")
    try:
        number = float(quantity[: len(quantity) - len(unit)])
    except ValueError:
        return None
    return number * _UNITS[unit] if unit else number / 2**30


__all__ = [
    "Attempt",
    "Decision",
    "Facts",
    "Remedy",
    "breaker",
    "decide",
    "facts_from_snapshot",
    "remedy",
]
