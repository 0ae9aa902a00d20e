"""Which rank holds the others back, on the step lines.

FSDP ranks move in lockstep: every collective waits for the last rank to arrive, so
each rank's wall-clock step time is the same and says nothing about who is slow. What
differs is the time a rank's own process lost: a `StallClock` thread wakes every tick
and counts the time it woke late by more than a tick (the process was stopped,
CPU-throttled by its cgroup, descheduled by a noisy neighbour, swapping). On log steps
every rank's lost seconds per step go to all ranks in one all_gather of one float
(nothing on other steps: no extra host sync), and rank 0 names the slowest rank, its
host (gathered once at start) and its lag behind the median rank.

It does not see a GPU that computes slower than its peers (thermal throttling): that
needs device-side timings of the compute kernels alone.
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

    def __init__(self, device: torch.device, step: int) -> None:
        self.device = device
        self.world_size = dist.get_world_size()
        hosts: list[str] = [""] * self.world_size
        dist.all_gather_object(hosts, host_name())
        self.hosts = hosts
        self.clock = StallClock().start()
        self.last_step, self.last_stalled = step, 0.0

    def window(self, step: int) -> dict[str, object]:
        """The slowest rank since the last call (a log step), as step-line fields."""
        stalled = self.clock.stalled_s
        steps = max(1, step - self.last_step)
        mine = torch.tensor([(stalled - self.last_stalled) / steps], dtype=torch.float32)
        self.last_step, self.last_stalled = step, stalled
        if self.device.type == "cuda":
            mine = mine.pin_memory().to(self.device, non_blocking=True)
        gathered = torch.empty(self.world_size, dtype=torch.float32, device=self.device)
        dist.all_gather_into_tensor(gathered, mine)
        return slowest(gathered.tolist(), self.hosts)

    def close(self) -> None:
        self.clock.close()
