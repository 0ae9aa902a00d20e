"""Fleet scale per item of issue 35's leftovers, each at three sizes spanning 16x, all
through the MCP server in process (what an agent gets: time, API requests or records
read, peak traced memory, result bytes as sent):

- events: a poll and a doctor snapshot of one job while the namespace holds 200 / 800 /
  3,200 other events (kmock counts the event LISTs and the objects it serves);
- list_training_jobs (local, a page of 20) over 10 / 40 / 160 ended jobs, each with a
  16 MiB log: the list answers from the records (the log is never read);
- list_operations (a page of 20, then the page at the end by cursor) over 100 / 400 /
  1,600 records: records read (the last page is sought by name: it reads its own);
- list_model_servers (Kubernetes, a page of 20) over 20 / 80 / 320 servers: requests;
- the last-resort cap: list_training_jobs with limit=200 over 200 / 800 / 3,200 jobs
  (a page of 200 jobs is past 40 KB): the bytes sent stay under 40 KB and the `rest`
  call continues the page.

`--quick` runs the smallest size of each once (the test suite runs it)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
from mcp import Client  # noqa: E402

from benchmarks._from_run import finished_job  # noqa: E402
from mcp_server import build_server  # noqa: E402
from mcp_server.result_cap import result_bytes  # noqa: E402

QUICK = "--quick" in sys.argv
EVENTS = [200] if QUICK else [200, 800, 3_200]
JOBS = [10] if QUICK else [10, 40, 160]
OPERATIONS = [100] if QUICK else [100, 400, 1_600]
SERVERS = [20] if QUICK else [20, 80, 320]
CAPPED = [200] if QUICK else [200, 800, 3_200]
LOG_MIB = 16
PROCESSES = 1 if QUICK else 2  # of the local job copied (its record and log are all it is for)


def _timed(call, *args: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = call(*args)
    return out, time.perf_counter() - start


def _measured(call, *args: Any) -> tuple[Any, float, float]:
    """(what call(*args) returned, seconds, peak traced MiB of a second call: tracing
    slows what it traces)."""
    out, elapsed = _timed(call, *args)
    tracemalloc.start()
    call(*args)
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return out, elapsed, peak


def _mcp(name: str, args: dict[str, Any]):
    async def one():
        async with Client(build_server()) as client:
            return await client.call_tool(name, args)

    return anyio.run(one)


def _row(*cells: Any) -> None:
    print(" | ".join(f"{c:>10}" if not isinstance(c, str) else f"{c:>10}" for c in cells))


# --- events -----------------------------------------------------------------------------


def events() -> None:
    from skills.training_job_deployer.targets.kubernetes.settings import KubernetesSettings
    from skills.training_job_deployer.targets.kubernetes.target import KubernetesTarget
    from tests.services.kube import kube_server
    from tests.services.training_operator import TrainingOperator

    print("\nevents of one job (2 pods, one waiting) while the namespace holds others")
    _row("others", "poll LISTs", "served", "poll ms", "snap LISTs", "served", "snap ms")
    with kube_server() as kube:
        os.environ["KUBECONFIG"] = str(kube.kubeconfig)
        operator = TrainingOperator(kube)
        from commands.deploy_training_job import deploy_training_job

        deploy_training_job(job_name="llama", num_nodes=2, gpu_per_node=8, wait_seconds=0,
                            image_uri="localhost:9/f:1", instance_type="p5.48xlarge",
                            skip_gate=True)  # fmt: skip
        operator.run("llama", outcome="Running")
        pending = {"status": {"phase": "Pending", "containerStatuses": []}}
        operator.core.patch_namespaced_pod_status("llama-worker-0", "default", pending,
                                                  _preload_content=False)  # fmt: skip
        operator.add_event("llama-worker-0", "FailedScheduling", "0/4 nodes are available.")
        target = KubernetesTarget(KubernetesSettings())
        seeded = 0
        for total in EVENTS:
            for i in range(seeded, total):
                kube.emulator.objects["v1/events", "default", f"noise-{i}"] = {
                    "apiVersion": "v1", "kind": "Event",
                    "metadata": {"name": f"noise-{i}", "namespace": "default"},
                    "involvedObject": {"kind": "Pod", "name": f"other-{i}-worker-0"},
                    "reason": "FailedScheduling", "message": "not ours", "type": "Warning",
                }  # fmt: skip
            seeded = total
            cells: list[Any] = [total]
            for read in (lambda: target.describe("llama"), lambda: target.snapshot("llama")):
                lists = kube.emulator.lists.get("v1/events", 0)
                served = kube.emulator.listed_objects
                _, elapsed = _timed(read)
                lists = kube.emulator.lists.get("v1/events", 0) - lists
                cells += [lists, kube.emulator.listed_objects - served, f"{elapsed * 1000:.0f}"]
            _row(*cells)


# --- local list from records ----------------------------------------------------------------


def _copies(runs: Path, count: int, log: Path | None = None) -> None:
    record = json.loads((runs / "job-0" / "job.json").read_text())
    for i in range(1, count):
        copy = runs / f"job-{i}"
        if copy.exists():
            continue
        # Files linked, not copied (3,200 run directories fit): the record is a new file.
        shutil.copytree(runs / "job-0", copy, symlinks=True, copy_function=os.link)
        (copy / "job.json").unlink()
        (copy / "job.json").write_text(json.dumps({**record, "job_name": copy.name}))
        if log is not None:  # one 16 MiB file, linked: the disk holds it once
            target = copy / "logs" / "attempt-1.log"
            target.unlink()
            os.link(log, target)


def local_lists(root: Path) -> None:
    runs = root / "runs"
    finished_job(runs, "job-0", steps=2, processes=PROCESSES)  # or --from-run's copy
    big = root / "big.log"
    with open(big, "wb") as out:
        line = (runs / "job-0" / "logs" / "attempt-1.log").read_bytes()
        out.write(line * (LOG_MIB * 2**20 // max(1, len(line)) + 1))
    _mcp("list_training_jobs", {"target": "local", "local": {"runs_dir": str(runs)}})  # warm
    print(f"\nlist_training_jobs (local, a page of 20), ended jobs with {LOG_MIB} MiB logs")
    _row("jobs", "ms", "peak MiB", "bytes")
    for count in JOBS:
        _copies(runs, count, big)
        args = {"target": "local", "local": {"runs_dir": str(runs)}, "limit": 20}
        result, elapsed, peak = _measured(_mcp, "list_training_jobs", args)
        assert not result.is_error and all(
            j["steps"] == 2 for j in result.structured_content["jobs"]
        )
        _row(count, f"{elapsed * 1000:.0f}", f"{peak:.1f}", result_bytes(result))

    print("\nthe 40 KB cap: list_training_jobs limit=200 (each job listed with its figures)")
    _row("jobs", "kept", "bytes", "rest ms", "rest bytes")
    for count in CAPPED:
        _copies(runs, count)
        args = {"target": "local", "local": {"runs_dir": str(runs)}, "limit": 200}
        first = _mcp("list_training_jobs", args)
        note = (first.structured_content or {}).get("truncated")
        kept = len(first.structured_content["jobs"])
        if note is None:
            _row(count, kept, result_bytes(first), "-", "-")
            continue
        rest = note["rest"]
        second, elapsed = _timed(_mcp, rest["tool"], rest["arguments"])
        _row(count, kept, result_bytes(first), f"{elapsed * 1000:.0f}", result_bytes(second))


# --- operations -----------------------------------------------------------------------------


def operation_lists(root: Path) -> None:
    from benchmarks.fleet_history_and_logs import seed_operations
    from skills.operations import operations

    os.environ[operations.STATE_DIR_ENV] = str(root / "state")
    print("\nlist_operations: a page of 20, and the last page by cursor")
    _row("records", "reads", "ms", "last reads", "last ms", "bytes")
    now, seeded = time.time(), 0
    for count in OPERATIONS:
        seed_operations(count, start=seeded, now=now)
        seeded = count
        cells: list[Any] = [count]
        for cursor in (None, _cursor_of_the_last_20(count)):
            reads: list[str] = []
            real = operations._read
            operations._read = lambda op_id, real=real, reads=reads: (
                reads.append(op_id),
                real(op_id),
            )[1]
            args = {"limit": 20} if cursor is None else {"limit": 20, "cursor": cursor}
            result, elapsed = _timed(_mcp, "list_operations", args)
            operations._read = real
            cells += [len(reads), f"{elapsed * 1000:.0f}"]
        _row(*cells, result_bytes(result))


def _cursor_of_the_last_20(count: int) -> str:
    """The cursor a client paging through `count` operations holds before the last 20
    (pages of 50, as the tool allows; not timed)."""
    cursor, left = None, count - 20
    while left:
        args: dict[str, Any] = {"limit": min(50, left)} | ({"cursor": cursor} if cursor else {})
        cursor = _mcp("list_operations", args).structured_content["next_cursor"]
        left -= args["limit"]
    assert cursor is not None
    return cursor


# --- model servers --------------------------------------------------------------------------


def server_lists() -> None:
    from skills.model_server.kubernetes.manifest import labels
    from tests.services.kube import kube_server

    print("\nlist_model_servers (Kubernetes, a page of 20)")
    _row("servers", "requests", "ms", "bytes")
    with kube_server() as kube:
        os.environ["KUBECONFIG"] = str(kube.kubeconfig)
        seeded = 0
        for count in SERVERS:
            for i in range(seeded, count):
                name = f"srv-{i:04d}"
                meta = {"name": name, "namespace": "default", "labels": labels(name)}
                kube.emulator.objects["apps/v1/deployments", "default", name] = {
                    "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
                    "spec": {"replicas": 1}, "status": {"readyReplicas": 1, "replicas": 1},
                }  # fmt: skip
                kube.emulator.objects["v1/services", "default", name] = {
                    "apiVersion": "v1", "kind": "Service", "metadata": meta,
                    "spec": {"type": "ClusterIP", "ports": [{"port": 8000}]},
                }  # fmt: skip
            seeded = count
            before = len(kube.emulator._requests)
            args = {"target": "kubernetes", "limit": 20}
            result, elapsed = _timed(_mcp, "list_model_servers", args)
            assert not result.is_error, result
            requests = len(kube.emulator._requests) - before
            _row(count, requests, f"{elapsed * 1000:.0f}", result_bytes(result))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["FSDP_EKS_STATE_DIR"] = str(root / "state")
        events()
        local_lists(root)
        operation_lists(root)
        server_lists()


if __name__ == "__main__":
    main()
