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
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from skills.job_doctor.diagnose import diagnose  # noqa: E402
from skills.job_doctor.failure_signatures import rows_for  # noqa: E402
from tests.fixtures.pod_doctor import snapshots as fx  # noqa: E402

QUICK = "--quick" in sys.argv  # 8 pods, 1 MiB, once (the test suite runs it)
RUNS = 1 if QUICK else 5
PODS = 8 if QUICK else 64
LOG_CHARS = (1 if QUICK else 10) * 2**20 // PODS
OOM_WORKER = 5 if QUICK else 37  # node rank 6 / 38


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


if __name__ == "__main__":
    main()
