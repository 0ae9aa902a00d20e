"""What the fleet benchmarks share: the growth exponent of a cost against size, and a
call's best-of-3 wall and CPU time with the peak memory of one more (traced) call."""

from __future__ import annotations

import math
import time
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any


def growth_exponent(sizes: Sequence[float], values: Sequence[float]) -> float:
    """k: the least-squares slope of log(value) over log(size): 1 grows linearly with the
    size, 0 does not grow, 2 is quadratic. A zero value counts as 1e-9 (no log of 0)."""
    xs = [math.log(s) for s in sizes]
    ys = [math.log(max(v, 1e-9)) for v in values]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


def measured(call: Callable[[], Any]) -> tuple[Any, float, float, float]:
    """(what call() returned, seconds of wall and of this process's CPU (each the best of
    3: a shared machine's noise; CPU, user and system, is what the load distorts least),
    peak traced MiB of a fourth call: tracing slows what it traces)."""
    best, best_cpu, out = math.inf, math.inf, None
    for _ in range(3):
        start, cpu = time.perf_counter(), time.process_time()
        out = call()
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best = min(best, time.perf_counter() - start)
    tracemalloc.start()
    call()
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return out, best, best_cpu, peak
