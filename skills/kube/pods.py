"""The one reader of a training job's JSON (job, pods, events) as the Kubernetes API
returns it (camelCase dicts, never the client's models), a PyTorchJob's (Training
Operator v1) or a TrainJob's (Kubeflow Trainer v2: its pods are a JobSet's): the
monitor and the job doctor both read through here. Every reader is defensive: a field
that is missing or of the wrong type reads as None/""/[] (a saved snapshot may come from
anywhere)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

# The Training Operator's labels on a job's pods, and its trainer container's name.
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
CONTAINER = "pytorch"
# A TrainJob's pods are its JobSet's (jobset v0.12.0 api/jobset/v1alpha2/jobset_types.go):
# the JobSet is named as the TrainJob; each node is one pod of the Indexed Job of the
# replicated job "node", and its node rank is the pod's completion index (Trainer v2.3.0
# plugins/torch/torch.go sets PET_NODE_RANK from that annotation).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # a label and an annotation
TRAINER_CONTAINER = "node"  # Trainer v2's trainer container (constants.Node)
# A snapshot's log key for a pod's restarted (previous) container: "<pod>/previous".
PREVIOUS = "/previous"

_NAME_RANK = re.compile(r"-(master|worker)-(\d+)$", re.IGNORECASE)


# --- defensive field access ----------------------------------------------------------


def get(obj: Any, *path: str) -> Any:
    """obj[path[0]][path[1]]...; None where a step is missing or not a mapping."""
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def api_time(value: Any) -> datetime | None:
    """An RFC 3339 time of the API as a datetime (None when it is not one)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def event_time(event: Any) -> datetime | None:
    """When an event last happened, from whichever time field the API filled in."""
    for path in (
        ("lastTimestamp",),
        ("eventTime",),
        ("series", "lastObservedTime"),
        ("firstTimestamp",),
        ("metadata", "creationTimestamp"),
    ):
        found = api_time(get(event, *path))
        if found:
            return found
    return None


def older_than(event: Any, job: Any) -> bool:
    """An event from before `job` was created: about an earlier job of the same name (a
    resubmission reuses the pod names; the API keeps events for an hour)."""
    created = api_time(get(job, "metadata", "creationTimestamp"))
    when = event_time(event)
    return created is not None and when is not None and when < created


# --- pods --------------------------------------------------------------------------------


def pod_name(pod: Any) -> str:
    return text(get(pod, "metadata", "name"))


# Waiting reasons every starting pod passes through (its containers being made, its init
# containers running); any other reason says what the pod waits for.
ROUTINE_WAITS = frozenset({"ContainerCreating", "PodInitializing"})


def why_pod_waits(pod: Any) -> str | None:
    """What a pod waits for that is not routine, in one line (None: nothing, or only
    routine): not scheduled (the scheduler's message), else the first container, init
    containers first, waiting for a reason not in ROUTINE_WAITS (ImagePullBackOff,
    CreateContainerConfigError: a missing Secret...). The one reading for every target."""
    name = pod_name(pod)
    for condition in items(get(pod, "status", "conditions")):
        if get(condition, "type") == "PodScheduled" and get(condition, "status") == "False":
            why = text(get(condition, "message")) or text(get(condition, "reason"))
            return f"Pod {name} is not scheduled: {(why or 'not scheduled')[:300]}"
    containers = items(get(pod, "status", "initContainerStatuses")) + items(
        get(pod, "status", "containerStatuses")
    )
    for container in containers:
        reason = text(get(container, "state", "waiting", "reason"))
        if reason and reason not in ROUTINE_WAITS:
            message = text(get(container, "state", "waiting", "message"))
            detail = f": {message[:300]}" if message else ""
            return f"Pod {name} container {text(get(container, 'name'))}: {reason}{detail}"
    return None


def completion_index(pod: Any) -> int | None:
    """A JobSet pod's completion index (its node rank), from the annotation the Job
    controller always sets (the label only on Kubernetes 1.28+); None for other pods."""
    if not text(get(pod, "metadata", "labels", JOBSET_NAME_LABEL)):
        return None
    for where in ("annotations", "labels"):
        index = as_int(get(pod, "metadata", where, COMPLETION_INDEX))
        if index is not None:
            return index
    return None


def pod_order(pod: Any) -> tuple[int, int, str]:
    """Master first, then by replica index (a JobSet pod's: its completion index)."""
    labels = get(pod, "metadata", "labels")
    kind = 0 if text(get(labels, REPLICA_TYPE_LABEL)).lower() == "master" else 1
    index = as_int(get(labels, REPLICA_INDEX_LABEL))
    if index is None:
        index = completion_index(pod)
    return kind, 0 if index is None else index, pod_name(pod)


def restarts(pods: Iterable[Any]) -> int:
    """Container restarts over all the job's pods."""
    return sum(
        as_int(get(c, "restartCount")) or 0
        for p in pods
        for c in items(get(p, "status", "containerStatuses"))
    )


def exit_code(pod: Any) -> int | None:
    """The trainer container's exit code once it terminated (None while it runs)."""
    for status in items(get(pod, "status", "containerStatuses")):
        if get(status, "name") not in (CONTAINER, TRAINER_CONTAINER):
            continue
        terminated = get(status, "state", "terminated") or get(status, "lastState", "terminated")
        code = as_int(get(terminated, "exitCode"))
        if code is not None:
            return code
    return None


@dataclass(frozen=True)
class PodInfo:
    name: str
    rank: int | None
    replica: str | None
    node: str | None


def has_master(job: Any, pods: Iterable[Any]) -> bool:
    specs = get(job, "spec", "pytorchReplicaSpecs")
    if isinstance(specs, Mapping) and any(str(k).lower() == "master" for k in specs):
        return True
    return any(
        text(get(p, "metadata", "labels", REPLICA_TYPE_LABEL)).lower() == "master" for p in pods
    )


def _env_rank(pod: Any) -> int | None:
    """The node rank the operator put in the pod's env (PET_NODE_RANK, else RANK)."""
    for container in items(get(pod, "spec", "containers")):
        env = {text(get(e, "name")): get(e, "value") for e in items(get(container, "env"))}
        for name in ("PET_NODE_RANK", "NODE_RANK", "RANK"):
            rank = as_int(env.get(name))
            if rank is not None and rank >= 0:
                return rank
    return None


def pod_info(pod: Any, master: bool) -> PodInfo:
    """Name, node rank and replica of a pod: from the operator's labels (Master-0 is node
    rank 0, Worker-i is i+1 beside a Master, else i), else its env, else its name. A
    JobSet pod's rank is its completion index, its replica "<replicated job>-<rank>"
    ("node-1"): its name is generated, never read for a rank."""
    name = pod_name(pod)
    labels = get(pod, "metadata", "labels")
    node = get(pod, "spec", "nodeName")
    index = completion_index(pod)
    if index is not None:
        replica = f"{text(get(labels, REPLICATED_JOB_LABEL)) or TRAINER_CONTAINER}-{index}"
        return PodInfo(name, index, replica, node if isinstance(node, str) else None)
    kind = text(get(labels, REPLICA_TYPE_LABEL)).lower()
    index = as_int(get(labels, REPLICA_INDEX_LABEL))
    if not kind or index is None:
        matched = _NAME_RANK.search(name)
        if matched:
            kind, index = matched[1].lower(), int(matched[2])
    rank: int | None = None
    if kind == "master" and index is not None:
        rank = index
    elif kind == "worker" and index is not None:
        rank = index + (1 if master else 0)
    if rank is None:
        rank = _env_rank(pod)
    replica = f"{kind}-{index}" if kind and index is not None else None
    return PodInfo(name, rank, replica, node if isinstance(node, str) else None)


# --- the job -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Condition:
    type: str
    reason: str | None
    message: str | None


def true_conditions(job: Any) -> list[Any]:
    return [c for c in items(get(job, "status", "conditions")) if get(c, "status") == "True"]


# A job's conditions that end it: a PyTorchJob's Succeeded/Failed, a TrainJob's
# Complete/Failed (Trainer v2.3.0 pkg/apis/trainer/v1alpha1/trainjob_types.go).
SUCCEEDED = ("Succeeded", "Complete")


def current_condition(job: Any) -> Condition | None:
    """The newest true condition of a PyTorchJob (Created, Running, Restarting,
    Succeeded, Failed, Suspended) or a TrainJob (Created, Suspended, Complete,
    Failed); a terminal one wins."""
    conditions = true_conditions(job)
    if not conditions:
        return None
    last = conditions[-1]
    for terminal in ("Failed", *SUCCEEDED):
        for c in conditions:
            if get(c, "type") == terminal:
                last = c
    return Condition(str(get(last, "type")), get(last, "reason"), get(last, "message"))


def suspended(job: Any) -> bool:
    """Whether the job is asked to stop: a PyTorchJob's spec.runPolicy.suspend, a
    TrainJob's spec.suspend."""
    return bool(get(job, "spec", "runPolicy", "suspend") or get(job, "spec", "suspend") is True)


def job_status(job: Any) -> str:
    """The job's status as the local target names them."""
    condition = current_condition(job)
    kind = condition.type if condition else None
    if kind in SUCCEEDED:
        return "succeeded"
    if kind == "Failed":
        return "failed"
    if suspended(job) or kind == "Suspended":
        return "cancelled"
    return "running"
