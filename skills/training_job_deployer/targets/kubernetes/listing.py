"""The suite's jobs of a namespace listed a page at a time, newest first, of every engine:
what a page reads and is sent does not grow with the namespace."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from skills.kube import pods as kube_pods
from skills.kube.pods import pod_name
from skills.shared.paging import Key, Page, keyset_stream
from skills.shared.secrets import redact
from skills.training_job_deployer.models import JobState
from skills.training_job_deployer.targets.base import JobPage
from skills.training_job_deployer.targets.kubernetes.engine import Engine, commanded_max_steps
from skills.training_job_deployer.targets.kubernetes.kube_monitor import KubeReader
from skills.training_job_deployer.trainer_log import LogFollower, RunMetrics

# The end of rank 0's log a listing reads: room for the trainer's summary (or its last
# step) after what torchrun and NCCL print when a run ends.
LIST_LOG_LINES = 100
LIST_READS = 8  # a list page's log reads in flight at once


def list_jobs(
    reader: KubeReader,
    engines: list[Engine],
    page: JobPage,
    job_key: Callable[[str], Key | None],
    target: str,
) -> Page[JobState]:
    """The page of the suite's jobs in the namespace, newest first, of every engine
    (each says its engine; a kind the cluster does not serve is one LIST that finds
    nothing): status from the job (so a status
    filter reads no log); steps from the job object where its engine keeps progress
    there (a TrainJob's trainerStatus), else from the end of rank 0's log (the
    trainer's summary or its last step); max_steps from the trainer's start line
    there, else the job's command. Only the suite's jobs are sent (its label as the
    labelSelector). The API server has no order by creation time, so each job's key
    is read: their metadata alone in LIST chunks (whole jobs, JOB_CHUNK at a time,
    under a status filter), only the page kept; then the page's jobs and their pods
    are one LIST each by name, per kind; then one bounded log read per job of the
    page whose progress is not on its object and whose rank 0 started (concurrent).
    What a page holds and is sent of whole objects does not grow with the
    namespace."""
    filtered = page.status is not None
    jobs = (
        (engine, job)
        for engine in engines
        for job in reader.suite_jobs(metadata_only=not filtered, kind=engine.job_kind)
    )
    if filtered:
        jobs = ((e, j) for e, j in jobs if kube_pods.job_status(j) == page.status)
    shown, more, last = keyset_stream(
        jobs, lambda pair: creation_key(pair[1]), page.limit, page.cursor, job_key
    )
    rows: list[tuple[Engine, dict[str, Any], list[dict[str, Any]]]] = []
    for engine in engines:
        mine = [job for e, job in shown if e is engine]
        names = [(job.get("metadata") or {}).get("name", "") for job in mine]
        if not mine:
            continue
        if not filtered:  # a job deleted since its key was read is left out
            whole = reader.suite_jobs_named(names, engine.job_kind)
            mine = [whole[name] for name in names if name in whole]
        pods = reader.pods_of([job_name(job) for job in mine], engine.job_kind)
        rows += [(engine, job, pods.get(job_name(job), [])) for job in mine]
    rows.sort(key=lambda row: creation_key(row[1]))

    def metrics(row: tuple[Engine, dict[str, Any], list[dict[str, Any]]]) -> RunMetrics:
        engine, job, pods = row
        found = engine.progress(job)
        return found if found is not None else log_end_metrics(reader, engine, pods)

    # One bounded read per job of the page, LIST_READS at a time (each mostly waits).
    with ThreadPoolExecutor(max_workers=LIST_READS) as pool:
        read = list(pool.map(metrics, rows))
    states = []
    for (engine, job, _), found in zip(rows, read, strict=True):
        condition = kube_pods.current_condition(job)
        status = kube_pods.job_status(job)
        states.append(
            JobState(
                job_name=job_name(job),
                target=target,
                engine=engine.name,
                status=status,  # type: ignore[arg-type]
                steps=found.steps,
                max_steps=found.max_steps or commanded_max_steps(engine, job),
                last_loss=found.last_loss if engine.progress(job) else None,
                eta_s=engine.eta_s(job) if status == "running" else None,
                message=None if condition is None else redact(condition.message or ""),
            )
        )
    return Page(states, more, last)


def log_end_metrics(reader: KubeReader, engine: Engine, pods: list[dict[str, Any]]) -> RunMetrics:
    """What the last LIST_LOG_LINES lines of rank 0's log say (nothing before it runs)."""
    follower = LogFollower()
    rank0 = pods[0] if pods else None
    if rank0 is not None and (rank0.get("status") or {}).get("phase") != "Pending":
        log = reader.log(
            pod_name(rank0), tail_lines=LIST_LOG_LINES, container=engine.job_kind.container
        )
        follower.feed(log.encode(), final=True)
    return follower.metrics


def job_name(job: dict[str, Any]) -> str:
    return str((job.get("metadata") or {}).get("name", ""))


def creation_key(job: dict[str, Any]) -> Key:
    """A job's place in a list: newest created first, then by name (a status
    change leaves both alone)."""
    meta = job.get("metadata") or {}
    created = kube_pods.api_time(meta.get("creationTimestamp"))
    return (-(created.timestamp() if created else 0.0), str(meta.get("name", "")))
