"""A PyTorchJob's state as one snapshot, read live from the cluster: what the pod doctor
diagnoses and what `--save_snapshot` writes (pod_doctor.py has the format).

    snapshot = snapshot_from_cluster(api_client, namespace, job_name)

One list call per kind (pods by the operator's job-name label, events in the namespace)
plus a log read per pod (and its previous container's, after a restart), never one
call per object otherwise, all through kube_monitor.KubeReader. Selectors are applied
again there: an API server (or a stand-in) that ignores them must not bring in other
jobs' pods. Objects are kept
exactly as the API serves them (camelCase JSON), so a saved snapshot diagnoses the same
as the live state it came from; logs are masked (skills.shared.secrets.redact) as read.
The Kubernetes target's `snapshot(job_name)` is `read_snapshot` with its own reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.secrets import redact
from skills.training_job_deployer.kube_monitor import KubeReader, older_than
from skills.training_job_deployer.pod_doctor import PREVIOUS

# The operator names its container "pytorch"; the log of a pod is that container's.
TRAINER_CONTAINER = "pytorch"
# Lines of each log read: the end, where a failure is.
TAIL_LINES = 20_000


def snapshot_from_cluster(
    api_client: Any,
    namespace: str,
    job_name: str,
    *,
    tail_lines: int | None = TAIL_LINES,
    timestamps: bool = True,
) -> dict[str, Any]:
    """{"job", "pods", "events", "logs"} for one PyTorchJob, logs' secrets masked."""
    return read_snapshot(
        KubeReader(api_client, namespace), job_name, tail_lines=tail_lines, timestamps=timestamps
    )


def read_snapshot(
    reader: KubeReader,
    job_name: str,
    *,
    tail_lines: int | None = TAIL_LINES,
    timestamps: bool = True,
) -> dict[str, Any]:
    """The snapshot through `reader` (its client and namespace). A job that is gone but
    left pods is still diagnosed (job None); no job and no pods: ToolFailure(JOB_NOT_FOUND).
    Logs carry RFC 3339 timestamps (`timestamps`), which order findings across pods."""
    namespace = reader.namespace
    job = reader.job(job_name)
    pods = reader.pods(job_name)  # the job's label, re-applied; Master first, then by index
    if job is None and not pods:
        raise ToolFailure(
            ErrorCode.JOB_NOT_FOUND,
            f"No PyTorchJob {job_name!r} and no pods of it in namespace {namespace!r}.",
            "Check the job name and --namespace (kubectl get pytorchjobs -A).",
            {"job_name": job_name, "namespace": namespace},
        )
    names = {p["metadata"]["name"] for p in pods}
    nodes = {p.get("spec", {}).get("nodeName") for p in pods} - {None}
    events = [
        e
        for e in reader.namespace_events()
        if _about(e, job_name, names, nodes) and not older_than(e, job)
    ]
    events.sort(key=_event_order)
    logs: dict[str, str] = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        container, restarted = _trainer_container(pod)
        for previous in (False, True) if restarted else (False,):
            text = reader.log(
                name,
                container=container,
                previous=previous,
                tail_lines=tail_lines,
                timestamps=timestamps,
            )
            if text:
                logs[name + (PREVIOUS if previous else "")] = redact(text)
    return {"job": job, "pods": pods, "events": events, "logs": logs}


def _about(event: Mapping[str, Any], job: str, pods: set[str], nodes: set[str]) -> bool:
    """Whether an event is about this job, one of its pods, or a node they run on."""
    involved = event.get("involvedObject") or event.get("regarding") or {}
    kind, name = involved.get("kind"), involved.get("name")
    return (
        (kind == "Pod" and name in pods)
        or (kind == "PyTorchJob" and name == job)
        or (kind == "Node" and name in nodes)
    )


def _event_order(event: Mapping[str, Any]) -> str:
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )


def _trainer_container(pod: Mapping[str, Any]) -> tuple[str | None, bool]:
    """The container whose log to read, and whether it has a previous one (restarted)."""
    containers = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    name = TRAINER_CONTAINER if TRAINER_CONTAINER in containers else next(iter(containers), None)
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    status = next((s for s in statuses if s.get("name") == name), {})
    restarted = bool(status.get("restartCount")) or bool(
        (status.get("lastState") or {}).get("terminated")
    )
    return (name if len(containers) > 1 else None), restarted


def redacted(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """The snapshot with every string (logs, env values, messages) masked, for a file
    that leaves this machine (a bug report)."""
    return _masked(dict(snapshot))


def _masked(value: Any) -> Any:
    pending: list[Any] = []
    root = _copy(value, pending)
    while pending:  # a loop, not recursion: API objects nest deep
        target, key, item = pending.pop()
        target[key] = _copy(item, pending)
    return root


def _copy(value: Any, pending: list[Any]) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out[redact(str(key))] = None
            pending.append((out, redact(str(key)), item))
        return out
    if isinstance(value, list):
        items: list[Any] = [None] * len(value)
        for i, item in enumerate(value):
            pending.append((items, i, item))
        return items
    return value


__all__ = ["read_snapshot", "redacted", "snapshot_from_cluster"]
