"""A job's pod logs as the logs tools return them: rank 0's, one replica's, or the end
of every pod's; at most MAX_LOG_CHARS with a note of what was cut, secrets masked."""

from __future__ import annotations

from typing import Any

from skills.kube.pods import has_master, pod_info, pod_name
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.log_tail import LastLines, last_lines
from skills.shared.secrets import redact
from skills.training_job_deployer.targets.base import LogOptions
from skills.training_job_deployer.targets.kubernetes.kube_monitor import KubeReader
from skills.training_job_deployer.targets.kubernetes.rank0_log import LOG_POLL_LINES

MAX_LOG_CHARS = 64_000  # what one logs call returns at most


def pod_path(pod: str, namespace: str) -> str:
    """Where a pod's log is, as kubectl names it."""
    return f"pod/{pod} -n {namespace}"


def read_logs(
    reader: KubeReader,
    job_name: str,
    pods: list[dict[str, Any]],
    tail_lines: int | None,
    options: LogOptions,
) -> str:
    """Rank 0's log, or one replica's ('worker-1'), or the last lines of every pod;
    at most MAX_LOG_CHARS, with a note of what was cut; secrets masked."""
    if not pods:
        return ""
    read = {"previous": options.previous, "since_seconds": options.since_seconds}
    if options.all_ranks:
        each = max(5, (tail_lines or 100) // len(pods))
        parts = []
        for pod in pods:
            text, _ = reader.log_end(pod_name(pod), each, MAX_LOG_CHARS, **read)
            parts.append(f"==> {pod_name(pod)} <==\n{text.rstrip()}")
        return bounded(redact("\n".join(parts)))
    chosen = replica_pod(job_name, pods, options.replica)
    text, fewer = reader.log_end(
        pod_name(chosen), tail_lines or LOG_POLL_LINES, MAX_LOG_CHARS * 2, **read
    )
    if fewer and len(text) <= MAX_LOG_CHARS:  # else bounded says what it cut
        text = f"[... earlier lines cut: at most {MAX_LOG_CHARS} characters per call ...]\n{text}"
    return bounded(redact(text.rstrip("\n")))


def read_log_tail(
    reader: KubeReader,
    job_name: str,
    pods: list[dict[str, Any]],
    tail_lines: int,
    max_bytes: int,
    options: LogOptions,
) -> LastLines:
    """One pod's end as the API serves it (tailLines, limitBytes: log_end), cut to the
    budget from its end; no note line in it: the result says what was left out."""
    if not pods:
        return LastLines([], None, False, False, 0)
    chosen = replica_pod(job_name, pods, options.replica)
    read = {"previous": options.previous, "since_seconds": options.since_seconds}
    text, fewer = reader.log_end(pod_name(chosen), tail_lines, max_bytes * 2, **read)
    data = redact(text).encode()
    found = last_lines(lambda at, n: data[at : at + n], len(data), tail_lines, max_bytes)
    found.earlier = found.earlier or fewer
    found.start = None  # the API has no byte offsets into a pod's log
    return found


def replica_pod(job_name: str, pods: list[dict[str, Any]], replica: str | None) -> dict[str, Any]:
    """The pod of `replica` ('worker-1' of a PyTorchJob, 'node-1' of a TrainJob: node
    rank 1), rank 0's by default; not_found names the rest."""
    if replica is None:
        return pods[0]
    master = has_master(None, pods)
    named = {pod_info(p, master).replica: p for p in pods}
    chosen = named.get(replica.lower())
    if chosen is None:
        raise ToolFailure(
            ErrorCode.NOT_FOUND,
            f"Job {job_name!r} has no replica {replica!r}.",
            "Pick one of: " + ", ".join(str(r) for r in named),
        )
    return chosen


def bounded(text: str) -> str:
    """At most MAX_LOG_CHARS, the end kept, with a note of what was cut."""
    if len(text) <= MAX_LOG_CHARS:
        return text
    kept = text[-MAX_LOG_CHARS:]
    kept = kept[kept.find("\n") + 1 :]
    cut = text[: len(text) - len(kept)].count("\n")
    return f"[... {cut} earlier lines cut: at most {MAX_LOG_CHARS} characters per call ...]\n{kept}"
