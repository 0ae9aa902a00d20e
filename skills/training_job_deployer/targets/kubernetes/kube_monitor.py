"""Reads of a training job (a PyTorchJob or a TrainJob: the reader's JobKind) and what
belongs to it, as the Kubernetes API returns them
(camelCase JSON dicts, never the client's models): one GET for the job, one LIST per
kind (pods) filtered to the job, whatever its pod count, events filtered to the job's
objects by the API server (fieldSelector), and one log read for rank 0. The monitor,
the job tools and the job doctor's `snapshot` share these reads; skills.kube.pods reads
what they return. The doctor's snapshot reads the end of the log of each pod that needs
one (rank 0, and pods that failed, restarted or are not ready), SNAPSHOT_LOG_READS at a
time, within a byte budget for the whole snapshot.

Selectors are sent (a real API server filters) and applied again here (some servers
and emulators ignore them)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from skills.kube import dcgm
from skills.kube.client import LIST_CHUNK, KubeJson
from skills.kube.gpu_nodes import NOT_ENDED_SELECTOR
from skills.kube.objects import kind_path
from skills.kube.pods import (
    CONTAINER,
    JOB_NAME_LABEL,
    PREVIOUS,
    TRAINER_CONTAINER,
    older_than,
    pod_name,
    pod_order,
)
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.ownership import MANAGED_SELECTOR, labelled_ours
from skills.shared.secrets import redact

# Whole jobs a LIST request asks for at most: a list that must read each job's
# status (a status filter) holds this many at a time.
JOB_CHUNK = 100
# The label the suite puts on a job (PyTorchJob or TrainJob): its name, so a page's
# jobs are one LIST by it.
LABEL_JOB = "fsdp-eks/job"
# Names one labelSelector lists at most (`in (...)`: the request line stays a few KB).
NAMES_PER_LIST = 100
# Lines of each log a snapshot reads: the end, where a failure is.
SNAPSHOT_TAIL_LINES = 20_000
# A snapshot's log reads in flight at once (each mostly waits on the kubelet), and the
# bytes of all its logs together: each log's share of them, within a floor and a ceiling
# (64 pods: 4 MiB each; 4,096: the last 64 KiB, still a traceback and the lines before).
SNAPSHOT_LOG_READS = 8
SNAPSHOT_LOG_BUDGET = 256 * 2**20
SNAPSHOT_LOG_BYTES = (64 * 1024, 4 * 2**20)
SNAPSHOT_LINE_BYTES = 200  # a log line's usual size (timestamped): tailLines from bytes
# Where the API keeps events about cluster-scoped objects (a node's: its agents' XIDs).
NODE_EVENTS_NAMESPACE = "default"
# Up to this many objects, their events are one LIST each (filtered to the object by the
# API server); past it, one LIST per kind (a 1,000-pod job: 3 requests, not 1,000).
EVENT_LISTS = 32


@dataclass(frozen=True)
class JobKind:
    """What the reads of a job need to know of its kind: its kind (skills.kube.objects
    KINDS), the label its controller puts on the job's pods (the job's name), and the
    trainer container of those pods."""

    kind: str
    pod_label: str
    container: str


PYTORCHJOB = JobKind("PyTorchJob", JOB_NAME_LABEL, CONTAINER)
# The log of a pod's trainer container, whichever kind of job it belongs to.
TRAINER = ""


class KubeReader(KubeJson):
    """The API reads of the Kubernetes target in one namespace (raw JSON:
    skills.kube.client), of jobs of one kind (`kind`, which the target may set once it
    knows it): what the monitor and the doctor's snapshot need (the target's writes:
    job_client.JobClient). `calls` counts requests."""

    def __init__(self, api_client: Any, namespace: str, kind: JobKind = PYTORCHJOB) -> None:
        super().__init__(api_client)
        self.namespace = namespace
        self.kind = kind

    def _jobs_path(self, name: str = "", kind: JobKind | None = None) -> str:
        return kind_path((kind or self.kind).kind, self.namespace, name or None)

    # discovery and jobs -------------------------------------------------------

    def job(self, name: str) -> dict[str, Any] | None:
        return self.json("GET", self._jobs_path(name), missing_ok=(404,))

    def suite_jobs(
        self, *, metadata_only: bool = False, kind: JobKind | None = None
    ) -> Iterator[dict[str, Any]]:
        """The suite's PyTorchJobs in the namespace, one chunk of a LIST at a time: the
        API server selects them by the suite's label (other users' jobs are not sent).
        Whole jobs come JOB_CHUNK a request (a parsed job is ~25 KB); `metadata_only`,
        LIST_CHUNK of their metadata alone."""
        chunks = self.chunks(
            self._jobs_path(kind=kind),
            {"labelSelector": MANAGED_SELECTOR},
            size=LIST_CHUNK if metadata_only else JOB_CHUNK,
            metadata_only=metadata_only,
        )
        for chunk in chunks:
            yield from (job for job in chunk if labelled_ours(job))
            del chunk  # the next chunk is read without this one held

    def suite_jobs_named(
        self, names: list[str], kind: JobKind | None = None
    ) -> dict[str, dict[str, Any]]:
        """These of the suite's jobs, by name: one LIST whose labelSelector names them."""
        found = [
            job
            for selector in named(LABEL_JOB, names)
            for job in self.items(
                self._jobs_path(kind=kind), {"labelSelector": f"{MANAGED_SELECTOR},{selector}"}
            )
        ]
        wanted = set(names)
        return {
            name: job
            for job in found
            if labelled_ours(job) and (name := (job.get("metadata") or {}).get("name")) in wanted
        }

    # what belongs to a job ------------------------------------------------------

    def pods(self, job_name: str) -> list[dict[str, Any]]:
        """The job's pods, one LIST; ordered Master first, then by replica index (node
        rank 0 first)."""
        label = self.kind.pod_label
        listed = self.json(
            "GET",
            kind_path("Pod", self.namespace),
            query={"labelSelector": self.pod_selector(job_name)},
        )
        pods = [
            p
            for p in listed.get("items") or []
            if ((p.get("metadata") or {}).get("labels") or {}).get(label) == job_name
        ]
        return sorted(pods, key=pod_order)

    def pod_selector(self, job_name: str) -> str:
        """The labelSelector of the job's pods (its controller's job-name label)."""
        return f"{self.kind.pod_label}={job_name}"

    def pods_of(
        self, job_names: list[str], kind: JobKind | None = None
    ) -> dict[str, list[dict[str, Any]]]:
        """The pods of these jobs by job name (each list ordered as pods() orders it):
        one LIST whose labelSelector names the jobs (`job-name in (a,b)`), so what is
        served follows the jobs asked about, not the namespace."""
        wanted, label = set(job_names), (kind or self.kind).pod_label
        by_job: dict[str, list[dict[str, Any]]] = {}
        pods = (
            pod
            for selector in named(label, job_names)
            for pod in self.items(kind_path("Pod", self.namespace), {"labelSelector": selector})
        )
        for pod in pods:
            job = ((pod.get("metadata") or {}).get("labels") or {}).get(label)
            if job in wanted:
                by_job.setdefault(job, []).append(pod)
        return {job: sorted(pods, key=pod_order) for job, pods in by_job.items()}

    def events(self, job_name: str, pod_names: list[str]) -> list[dict[str, Any]]:
        """Events of the job and of these pods, oldest first (events_about)."""
        objects = [(self.kind.kind, job_name), *(("Pod", name) for name in pod_names)]
        return sorted(self.events_about(objects), key=_event_order)

    def events_about(self, objects: list[tuple[str, str]]) -> list[dict[str, Any]]:
        """Events about these (kind, name) objects, filtered by the API server: one LIST
        per object with an involvedObject fieldSelector (a field selector has no OR), so
        the cost follows the objects asked about, not the events in the namespace. Past
        EVENT_LISTS objects, one LIST per kind instead (a selector on the kind alone)."""
        wanted = set(objects)
        if len(wanted) <= EVENT_LISTS:
            selectors = [f"involvedObject.kind={k},involvedObject.name={n}" for k, n in wanted]
        else:
            selectors = [f"involvedObject.kind={kind}" for kind in sorted({k for k, _ in wanted})]
        # A node's events may be in the namespace the API keeps cluster-scoped ones in.
        elsewhere = self.namespace != NODE_EVENTS_NAMESPACE
        asked = [(self.namespace, selector) for selector in sorted(selectors)] + [
            (NODE_EVENTS_NAMESPACE, selector)
            for selector in sorted(selectors)
            if elsewhere and "kind=Node" in selector
        ]
        found: list[dict[str, Any]] = []  # each event is about one object: no repeats
        for namespace, selector in asked:
            path = kind_path("Event", namespace)
            query = {"fieldSelector": selector}
            if namespace == self.namespace:
                listed = self.json("GET", path, query=query) or {}
            else:  # the cluster's namespace: the job's access may not reach it
                listed = _if_allowed(lambda p=path, q=query: [self.json("GET", p, query=q) or {}])
                listed = listed[0] if listed else {}
            found += [e for e in listed.get("items") or [] if _involved(e) in wanted]
        return found

    def log(
        self,
        pod: str,
        *,
        tail_lines: int | None = None,
        previous: bool = False,
        since_seconds: int | None = None,
        limit_bytes: int | None = None,
        timestamps: bool = False,
        container: str | None = TRAINER,
    ) -> str:
        """A pod's log ('' when it has none yet: a pending pod, no previous container);
        by default its trainer container's."""
        query = {
            "container": self.kind.container if container == TRAINER else container,
            "previous": "true" if previous else None,
            "timestamps": "true" if timestamps else None,
            "tailLines": tail_lines,
            "sinceSeconds": since_seconds,
            "limitBytes": limit_bytes,
        }
        status, data = self.request(
            "GET",
            kind_path("Pod", self.namespace, pod) + "/log",
            query=query,
            missing_ok=(400, 404),  # not started yet, or no previous container
        )
        return "" if status >= 300 else data.decode("utf-8", errors="replace")

    def log_end(self, pod: str, lines: int, max_bytes: int, **read: Any) -> tuple[str, bool]:
        """The end of a pod's log: its last `lines` lines, or fewer so that they fit in
        `max_bytes`, and whether it had to take fewer. (The kubelet's limitBytes keeps
        the first bytes of what tailLines chose, not the last: a cut answer is asked
        again for half the lines.)"""
        fewer = False
        while True:
            text = self.log(pod, tail_lines=lines, limit_bytes=max_bytes, **read)
            if len(text.encode()) < max_bytes or lines <= 1:
                return text, fewer
            lines, fewer = max(1, lines // 2), True

    def nodes(self) -> list[dict[str, Any]]:
        return list((self.json("GET", kind_path("Node")) or {}).get("items") or [])

    def all_pods(self) -> list[dict[str, Any]]:
        """Every namespace's pods that have not ended (those that may hold GPUs)."""
        listed = self.json("GET", kind_path("Pod"), query={"fieldSelector": NOT_ENDED_SELECTOR})
        return list((listed or {}).get("items") or [])


def named(label: str, names: list[str]) -> Iterator[str]:
    """labelSelectors for the objects whose `label` is one of `names`: `label in (a,b)`,
    NAMES_PER_LIST names each (one LIST each; a page's names are one)."""
    ordered = sorted(set(names))
    for start in range(0, len(ordered), NAMES_PER_LIST):
        yield f"{label} in ({','.join(ordered[start : start + NAMES_PER_LIST])})"


# the job doctor's snapshot ------------------------------------------------------------


def read_snapshot(
    reader: KubeReader,
    job_name: str,
    *,
    tail_lines: int | None = SNAPSHOT_TAIL_LINES,
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
            f"No {reader.kind.kind} {job_name!r} and no pods of it in namespace {namespace!r}.",
            "Check the job name and --namespace (list_training_jobs lists them).",
            {"job_name": job_name, "namespace": namespace},
        )
    names = {p["metadata"]["name"] for p in pods}
    nodes = {p.get("spec", {}).get("nodeName") for p in pods} - {None}
    kind = reader.kind.kind
    about = [(kind, job_name), *(("Pod", n) for n in names), *(("Node", n) for n in nodes)]
    events = [
        e
        for e in reader.events_about(about)
        if _about(e, (kind, job_name), names, nodes) and not older_than(e, job)
    ]
    events.sort(key=_event_order)
    # The nodes the pods ran on: their conditions are the node agents' evidence (XIDs).
    every = _if_allowed(reader.nodes) if nodes else []
    node_objects = [n for n in every if (n.get("metadata") or {}).get("name") in nodes]
    reads = [
        (pod_name(pod), container, previous)
        for i, pod in enumerate(pods)
        for container, previous in log_reads(pod, rank0=i == 0)
    ]
    each = log_share(len(reads))
    lines = min(tail_lines or SNAPSHOT_TAIL_LINES, max(1, each // SNAPSHOT_LINE_BYTES))

    def read(name: str, container: str | None, previous: bool) -> str:
        text, _ = reader.log_end(
            name, lines, each, container=container, previous=previous, timestamps=timestamps
        )
        return redact(text) if text else ""

    with ThreadPoolExecutor(max_workers=SNAPSHOT_LOG_READS) as pool:
        texts = list(pool.map(lambda r: read(*r), reads))
    logs = {
        name + (PREVIOUS if previous else ""): text
        for (name, _, previous), text in zip(reads, texts, strict=True)
        if text
    }
    snapshot = {"job": job, "pods": pods, "events": events, "logs": logs, "nodes": node_objects}
    # The DCGM exporter's GPU counters on those nodes, where it runs (skills/kube/dcgm.py).
    gpu_metrics, gpu_notes = dcgm.node_evidence(reader, sorted(nodes)) if nodes else ({}, [])
    if gpu_metrics:
        snapshot["gpu_metrics"] = gpu_metrics
    if gpu_notes:
        snapshot["gpu_notes"] = gpu_notes
    return snapshot


def _if_allowed(read: Callable[[], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """A read the job's own access may lack (nodes and the default namespace are the
    cluster's): refused, the snapshot goes without it rather than failing."""
    from kubernetes.client.exceptions import ApiException

    try:
        return read()
    except ApiException as exc:
        if exc.status in (401, 403):
            return []
        raise


def _about(event: Mapping[str, Any], job: tuple[str, str], pods: set[str], nodes: set[str]) -> bool:
    """Whether an event is about this job ((kind, name)), one of its pods, or a node
    they run on."""
    involved = event.get("involvedObject") or event.get("regarding") or {}
    kind, name = involved.get("kind"), involved.get("name")
    return (
        (kind == "Pod" and name in pods)
        or (kind, name) == job
        or (kind == "Node" and name in nodes)
    )


def _involved(event: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(kind, name) of what the event is about (re-checked: some servers ignore selectors)."""
    involved = event.get("involvedObject") or event.get("regarding") or {}
    return involved.get("kind"), involved.get("name")


def _event_order(event: Mapping[str, Any]) -> str:
    return str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )


def log_share(reads: int) -> int:
    """The bytes of one log's end a snapshot of `reads` logs reads."""
    low, high = SNAPSHOT_LOG_BYTES
    return max(low, min(high, SNAPSHOT_LOG_BUDGET // max(1, reads)))


def log_reads(pod: Mapping[str, Any], rank0: bool) -> list[tuple[str | None, bool]]:
    """The logs of a pod the doctor reads, as (container, previous): rank 0's always (its
    steps, and what the job's driver saw); another pod's only when it failed, restarted or
    is not ready, since a healthy rank's log says what rank 0's says (a job of 4,096 pods
    where one failed reads a few logs, not 4,096). A pod whose container never started
    has no log to read; one that restarted has its previous container's too."""
    container, restarted = _trainer_container(pod)
    status = _container_status(pod)
    state, last = status.get("state") or {}, status.get("lastState") or {}
    if not (state.get("running") or state.get("terminated") or last.get("terminated")):
        return []
    failed = (pod.get("status") or {}).get("phase") in ("Failed", "Unknown") or bool(
        ((state.get("terminated") or {}).get("exitCode") or 0) != 0
    )
    not_ready = bool(state.get("running")) and not status.get("ready", False)
    if not (rank0 or failed or restarted or not_ready):
        return []
    return [(container, False)] + ([(container, True)] if restarted else [])


def _trainer_container(pod: Mapping[str, Any]) -> tuple[str | None, bool]:
    """The container whose log to read (None: the pod's only one), and whether it has a
    previous one (restarted)."""
    containers = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    status = _container_status(pod)
    restarted = bool(status.get("restartCount")) or bool(
        (status.get("lastState") or {}).get("terminated")
    )
    return (status.get("name") if len(containers) > 1 else None), restarted


def _container_status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The trainer container's status ({} before the kubelet reports one)."""
    containers = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    trainer = [c for c in (CONTAINER, TRAINER_CONTAINER) if c in containers]
    name = trainer[0] if trainer else next(iter(containers), None)
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((s for s in statuses if s.get("name") == name), {"name": name})
