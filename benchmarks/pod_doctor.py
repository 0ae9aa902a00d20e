"""Pod doctor: diagnosis time on a 64-pod snapshot with about 10 MB of logs.

The snapshot is generated here: a Master and 63 Workers, each log about 160 KB of what
training pods print (the trainer's JSON step lines, NCCL INFO lines, Python warnings
that say "Error"), one worker's log ending in a CUDA OOM, the other 63 in NCCL watchdog
timeouts ten minutes later, and a pending-pod event. All numbers are measured in this run,
medians of 5:

* baseline: reading the logs once, `text.splitlines()` for every log (the least any
  log reader does);
* naive: every log row's regex on every line (what a per-line matcher costs; one run);
* diagnose(): the pod doctor (substring scan, then regexes on the few candidate lines).

It also checks the answer: the OOM's rank is the root cause.

Then the doctor at fleet size (issue 49): a job of 256, 1,024 and 4,096 pods (quick: 16
and 64) where one worker's OOM brings every other rank down in a collective timeout
(each log about 16 KB), diagnosed

* from its snapshot file (--snapshot, as --save_snapshot writes it): seconds, peak
  traced memory against the file's size, and a per_pod page;
* live, against kmock (the Kubernetes API and kubelet stand-in in-process, 2 ms a log
  read): seconds, requests (log reads among them) and the most log reads in flight;

and the growth exponent k of each time over the sizes (1 linear, 2 quadratic).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._growth import growth_exponent, measured  # noqa: E402
from commands.diagnose_training_job import diagnose_training_job  # noqa: E402
from skills.job_doctor.diagnose import diagnose  # noqa: E402
from skills.job_doctor.failure_signatures import rows_for  # noqa: E402
from skills.job_doctor.snapshot_file import snapshot_text  # noqa: E402
from skills.kube.pods import PREVIOUS  # noqa: E402
from tests.fixtures.pod_doctor import snapshots as fx  # noqa: E402

QUICK = "--quick" in sys.argv  # 8 pods, 1 MiB, once (the test suite runs it)
RUNS = 1 if QUICK else 5
PODS = 8 if QUICK else 64
LOG_CHARS = (1 if QUICK else 10) * 2**20 // PODS
OOM_WORKER = 5 if QUICK else 37  # node rank 6 / 38
FLEET = [16, 64] if QUICK else [256, 1024, 4096]
FLEET_LOG_CHARS = 16 * 1024


def _noise(host: str, chars: int) -> str:
    parts, size, step = [fx.nccl_init(host)], 0, 1
    warn = (
        "/opt/conda/lib/python3.11/site-packages/torch/distributed/fsdp/_fully_shard/"
        "_fsdp_state.py:112: UserWarning: Error handling of non-contiguous gradients is "
        "deprecated and will change in a future release\n"
    )
    while size < chars:
        block = fx.trainer_steps(step, step + 49) + f"{host}:57:140 [0] NCCL INFO Channel 00/0 : "
        block += "0[0] -> 1[1] via P2P/CUMEM/read\n" + warn
        parts.append(block)
        size += len(block)
        step += 50
    return "".join(parts)


def snapshot() -> dict:
    name = "bench"
    pods = [fx.pod(name, "master", 0, phase="Failed", state=fx.terminated(1, "Error",
                   "2026-11-20T12:15:07Z"))]  # fmt: skip
    logs = {f"{name}-master-0": _noise(f"{name}-master-0", LOG_CHARS) + fx.watchdog(0)}
    for i in range(PODS - 1):
        host = f"{name}-worker-{i}"
        oom = i == OOM_WORKER
        finished = "2026-11-20T12:05:01Z" if oom else "2026-11-20T12:15:08Z"
        pods.append(fx.pod(name, "worker", i, phase="Failed",
                           state=fx.terminated(1, "Error", finished)))  # fmt: skip
        tail = fx.oom_log(8 * (i + 1)) if oom else fx.watchdog(8 * (i + 1))
        logs[host] = (
            _noise(host, LOG_CHARS)
            + tail
            + fx.child_failed(
                8 * (i + 1), 0, host, 1 if oom else -6, "Signal 6 (SIGABRT) received by PID 1"
            )
        )
    events = [fx.event(f"{name}-worker-{i}", "BackOff", "Back-off restarting failed container")
              for i in range(PODS - 1)]  # fmt: skip
    return fx.snapshot(fx.job(name, PODS - 1), pods, events, logs)


def _median(fn, runs: int = RUNS) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    snap = snapshot()
    chars = sum(len(t) for t in snap["logs"].values())
    raw = json.dumps(snap)
    log_rows = rows_for("log")

    def baseline() -> None:
        for text in snap["logs"].values():
            text.splitlines()

    def naive() -> None:
        for text in snap["logs"].values():
            for line in text.splitlines():
                for row in log_rows:
                    if row.regex.search(line):
                        break

    result = diagnose(snap)
    assert result.root and result.root.code == "cuda_oom", result.summary
    assert result.root.rank == OOM_WORKER + 1, result.root
    base = _median(baseline)
    ours = _median(lambda: diagnose(snap))
    loaded = _median(lambda: diagnose(json.loads(raw)))
    slow = _median(naive, runs=1)  # seconds each: once is enough to compare
    print(f"pod doctor: {len(snap['pods'])} pods, {chars / 2**20:.1f} MiB of logs "
          f"({sum(t.count(chr(10)) for t in snap['logs'].values()):,} lines)")  # fmt: skip
    print(f"  baseline (splitlines of every log) {base * 1000:8.1f} ms")
    print(f"  diagnose()                          {ours * 1000:8.1f} ms  "
          f"({ours / base:.1f}x baseline)")  # fmt: skip
    print(f"  json.loads + diagnose() (--snapshot) {loaded * 1000:7.1f} ms")
    print(f"  naive: every row's regex per line  {slow * 1000:8.1f} ms  "
          f"({slow / base:.1f}x baseline, {slow / ours:.0f}x diagnose)")  # fmt: skip
    print(f"  root: {result.root.code} on {result.root.pod} (node rank {result.root.rank}); "
          f"{len(result.findings)} findings")  # fmt: skip


def fleet(pods: int, cascade: bool = True) -> dict:
    """A job of `pods` pods, one OOM (a third of the way in) and a timeout on each other
    (`cascade`), or the others still running, waiting in the collective (a hang)."""
    name, oom = "fleet", pods // 3
    noise = _noise(f"{name}-host", FLEET_LOG_CHARS)
    pod_list = [fx.pod(name, "master", 0, phase="Failed", state=fx.terminated(1, "Error",
                       "2026-11-20T12:15:07Z"))]  # fmt: skip
    logs = {f"{name}-master-0": noise + fx.watchdog(0)}
    for i in range(pods - 1):
        finished = "2026-11-20T12:05:01Z" if i == oom else "2026-11-20T12:15:08Z"
        if cascade or i == oom:
            pod_list.append(fx.pod(name, "worker", i, phase="Failed",
                                   state=fx.terminated(1, "Error", finished)))  # fmt: skip
        else:
            pod_list.append(fx.pod(name, "worker", i, state=fx.running()))
        end = fx.oom_log(8 * (i + 1)) if i == oom else fx.watchdog(8 * (i + 1))
        logs[f"{name}-worker-{i}"] = noise + end
    events = [fx.event(f"{name}-worker-{i}", "BackOff", "Back-off restarting failed container")
              for i in range(pods - 1)]  # fmt: skip
    return fx.snapshot(fx.job(name, pods - 1), pod_list, events, logs)


def _seed(kube, snap: dict) -> None:  # type: ignore[no-untyped-def]
    objects = kube.emulator.objects
    job = snap["job"]
    objects["kubeflow.org/v1/pytorchjobs", fx.NS, job["metadata"]["name"]] = job
    for pod in snap["pods"]:
        objects["v1/pods", fx.NS, pod["metadata"]["name"]] = pod
    for event in snap["events"]:
        objects["v1/events", fx.NS, event["metadata"]["name"]] = event
    for key, text in snap["logs"].items():
        kube.set_pod_log(fx.NS, key.removesuffix(PREVIOUS), text, previous=key.endswith(PREVIOUS))


def at_fleet_size() -> None:
    from tests.services.kube import kube_server

    print(f"\nthe doctor at fleet size: one OOM, a timeout on every other rank, "
          f"{FLEET_LOG_CHARS // 1024} KB logs")  # fmt: skip
    print(
        "  pods | file MiB | snapshot s (CPU) | peak MiB (x file) | per_pod page s, findings, "
        "KB | live s (CPU, kmock's too) | requests (logs) | in flight"
    )
    offline, live, offline_cpu, live_cpu = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp, kube_server() as kube:
        os.environ["KUBECONFIG"] = str(kube.kubeconfig)
        _seed(kube, fleet(4))  # warm: the first live call imports the Kubernetes client
        diagnose_training_job(job_name="fleet", namespace=fx.NS)
        for pods in FLEET:
            snap = fleet(pods)
            path = Path(tmp) / f"fleet-{pods}.json"
            path.write_text(snapshot_text(snap))
            size = path.stat().st_size / 2**20
            result, seconds, cpu, peak = measured(
                lambda p=path: diagnose_training_job(snapshot=str(p))
            )
            assert result.root.code == "cuda_oom", result.summary  # type: ignore[attr-defined]
            start = time.perf_counter()
            page = diagnose_training_job(snapshot=str(path), per_pod=True)
            page_s = time.perf_counter() - start
            kube.reset()
            _seed(kube, snap)
            del snap
            kube.log_latency = 0.002
            start, cpu_start = time.perf_counter(), time.process_time()
            found = diagnose_training_job(job_name="fleet", namespace=fx.NS)
            live_s = time.perf_counter() - start
            live_cpu.append(time.process_time() - cpu_start)
            assert found.root.code == "cuda_oom", found.summary
            paths = [str(r.url.path) for r in kube.emulator._requests]  # kmock 0.8: no public list
            logs = sum(p.endswith("/log") for p in paths)
            offline.append(seconds)
            offline_cpu.append(cpu)
            live.append(live_s)
            ratio = f"{peak:8.1f} ({peak / size:.2f}x)"
            shown = f"{page_s:.2f}, {len(page.findings)}, {len(page.model_dump_json()) / 1000:.1f}"
            asked = f"{len(paths):,} ({logs:,})"
            print(f"  {pods:>5,} | {size:8.1f} | {seconds:6.2f} ({cpu:.2f}) | {ratio} | {shown} "
                  f"| {live_s:6.2f} ({live_cpu[-1]:.2f}) | {asked} "
                  f"| {kube.logs_in_flight_peak}")  # fmt: skip
        # A hang: the OOM's pod failed, the others run, ready: rank 0's log and its only.
        kube.reset()
        _seed(kube, fleet(FLEET[-1], cascade=False))
        start = time.perf_counter()
        hung = diagnose_training_job(job_name="fleet", namespace=fx.NS)
        paths = [str(r.url.path) for r in kube.emulator._requests]
        logs = sum(p.endswith("/log") for p in paths)
        print(f"  a hang at {FLEET[-1]:,} pods (one failed, the rest running): live "
              f"{time.perf_counter() - start:.2f} s, {len(paths):,} requests "
              f"({logs} log reads); root {hung.root.code}")  # fmt: skip
    print(
        f"  growth exponent k over {FLEET[-1] // FLEET[0]}x pods: snapshot "
        f"{growth_exponent(FLEET, offline):.2f}, live {growth_exponent(FLEET, live):.2f} "
        f"(1 linear); CPU: snapshot {growth_exponent(FLEET, offline_cpu):.2f}, "
        f"live {growth_exponent(FLEET, live_cpu):.2f}"
    )
    print("load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
    at_fleet_size()
