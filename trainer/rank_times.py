"""Which rank holds the others back, on the step lines.

FSDP ranks move in lockstep: every collective waits for the last rank to arrive, so
each rank's wall-clock step time is the same and says nothing about who is slow. What
differs is the time a rank's own process lost: a `StallClock` thread wakes every tick
and counts the time it woke late by more than a tick (the process was stopped,
CPU-throttled by its cgroup, descheduled by a noisy neighbour, swapping). On log steps
every rank's lost seconds per step go to all ranks in one all_gather of one float
(nothing on other steps: no extra host sync), and rank 0 names the slowest rank, its
host (gathered once at start) and its lag behind the median rank.

A GPU that computes slower than its peers (thermal throttling, clocks capped by power)
loses no process time: on CUDA each log step also times a fixed matmul on the rank's
own device (`gpu_probe`, CUDA events, a few ms) and a rank whose probe is slower than the
median by a factor f is charged (f - 1) of the step's wall time, its compute being that
much longer (NVIDIA's resiliency straggler detection scores GPUs the same way, relative
kernel times). The probe's wait on its end event is the log step's one host sync, which
the logged loss needs anyway.
"""

from __future__ import annotations

import os
import socket
import statistics
import threading
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

# torch 2.13 renamed all_gather_into_tensor (the old name warns on every call, a
# FutureWarning in every rank's log); an image's older torch has only the old name.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

# The GPU probe: PROBE_REPEATS matmuls of PROBE_SIZE^2 bf16 (2 x 2048^3 x 16 = 0.27 TFLOP,
# a few ms on an H100; 24 MB, freed to the caching allocator after).
PROBE_SIZE = 2048
PROBE_REPEATS = 16
# A probe within this of the median is the same speed (clock jitter between GPUs).
PROBE_TOLERANCE = 0.05

# How often the clock thread wakes. A wake later than this by more than one tick counts
# as lost time; shorter waits are scheduler jitter (and GIL hand-over, at most 5 ms).
TICK_S = 0.01


def host_name(environ: dict[str, str] | None = None) -> str:
    """The node this rank runs on: Kubernetes' node name when the pod is told it
    (NODE_NAME from spec.nodeName), Slurm's node name, else the host name (a pod's is
    the pod's own)."""
    env = os.environ if environ is None else environ
    return env.get("NODE_NAME") or env.get("SLURMD_NODENAME") or socket.gethostname()


class StallClock:
    """A daemon thread adding up the time this process could not run."""

    def __init__(self, tick_s: float = TICK_S, clock: Callable[[], float] = time.monotonic):
        self.tick_s = tick_s
        self.clock = clock
        self.stalled_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stall-clock", daemon=True)

    def start(self) -> StallClock:
        self._thread.start()
        return self

    def _run(self) -> None:
        last = self.clock()
        while not self._stop.wait(self.tick_s):
            now = self.clock()
            self.stalled_s += lost(now - last, self.tick_s)
            last = now

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)


def lost(gap_s: float, tick_s: float) -> float:
    """The time lost in one wake-up `gap_s` after the last, of a thread that slept
    `tick_s`: what it overslept, when that is more than a tick (less is jitter)."""
    late = gap_s - tick_s
    return late if late > tick_s else 0.0


def gpu_lag(probes_s: list[float], step_s: float) -> list[float]:
    """Seconds per step each rank's slower GPU costs: (f - 1) x the step's wall time for
    a probe f times the median of the ranks' probes, 0 within PROBE_TOLERANCE (and for
    ranks with no probe, 0.0 from a CPU device)."""
    timed = [p for p in probes_s if p > 0]
    if len(timed) < 2:
        return [0.0] * len(probes_s)
    median = statistics.median(timed)
    return [
        (p / median - 1.0) * step_s if p > median * (1 + PROBE_TOLERANCE) else 0.0 for p in probes_s
    ]


def gpu_probe(device: torch.device) -> float:
    """Seconds a fixed matmul takes on this rank's GPU now (0.0 off CUDA: the stall clock
    covers a CPU rank)."""
    if device.type != "cuda":
        return 0.0
    a = torch.ones(PROBE_SIZE, PROBE_SIZE, device=device, dtype=torch.bfloat16)
    b = torch.empty_like(a)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(PROBE_REPEATS):
        torch.mm(a, a, out=b)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000.0


def slowest(per_rank: list[float], hosts: list[str]) -> dict[str, object]:
    """The step line's fields: the rank that lost the most time per step, its host,
    and how much more it lost than the median of the other ranks (seconds per step;
    the others', so that with two ranks the lag is not halved)."""
    rank = max(range(len(per_rank)), key=per_rank.__getitem__)
    others = per_rank[:rank] + per_rank[rank + 1 :]
    return {
        "slowest_rank": rank,
        "slowest_host": hosts[rank],
        "rank_lag_s": round(per_rank[rank] - statistics.median(others or [0.0]), 4),
    }


class RankTimes:
    """Every rank's lost time per step, gathered on log steps (collective: every rank
    calls `window` at the same steps)."""

    def __init__(
        self,
        device: torch.device,
        step: int,
        extra: Callable[[], list[float]] | None = None,
    ) -> None:
        self.device = device
        # More floats per rank in the same gather (GPU telemetry: trainer/gpu_telemetry.py),
        # the same count on every rank; each rank's are in `extra_rows` after a window.
        self.extra = extra
        self.extra_rows: list[list[float]] = []
        self.world_size = dist.get_world_size()
        hosts: list[str] = [""] * self.world_size
        dist.all_gather_object(hosts, host_name())
        self.hosts = hosts
        self.clock = StallClock().start()
        self.last_step, self.last_stalled, self.last_time = step, 0.0, time.monotonic()

    def window(self, step: int) -> dict[str, object]:
        """The slowest rank since the last call (a log step), as step-line fields: the
        time its process lost plus what its slower GPU cost, per step."""
        probe = gpu_probe(self.device)
        stalled, now = self.clock.stalled_s, time.monotonic()
        steps = max(1, step - self.last_step)
        step_s = (now - self.last_time) / steps
        extra = self.extra() if self.extra is not None else []
        values = [(stalled - self.last_stalled) / steps, probe, *extra]
        mine = torch.tensor(values, dtype=torch.float32)
        self.last_step, self.last_stalled, self.last_time = step, stalled, now
        if self.device.type == "cuda":
            mine = mine.pin_memory().to(self.device, non_blocking=True)
        width = len(values)
        gathered = torch.empty(width * self.world_size, dtype=torch.float32, device=self.device)
        _all_gather_single(gathered, mine)
        rows = gathered.view(self.world_size, width).tolist()
        self.extra_rows = [row[2:] for row in rows]
        pairs = [(row[0], row[1]) for row in rows]
        gpu = gpu_lag([p for _, p in pairs], step_s)
        return slowest([s + g for (s, _), g in zip(pairs, gpu, strict=True)], self.hosts)

    def close(self) -> None:
        self.clock.close()
