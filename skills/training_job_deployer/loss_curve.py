"""A job's curves from its step lines: what a chart (plot.py) and the one-line sparkline
of get_training_job's summary draw. Read from the trainer's JSON lines, the same on
every target; long runs are thinned to a bounded number of points (every other point
dropped when full), so memory and the picture stay small whatever the run's length."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

# Points a chart draws per curve at most; a sparkline's characters.
MAX_POINTS = 400
SPARK_WIDTH = 32
SPARK_BARS = "▁▂▃▄▅▆▇█"
# A step line's fields drawn, besides the loss (GPU utilisation from the ranks' NVML
# sampling, where the trainer reports it).
EXTRA = ("lr", "tokens_per_s", "gpu_util_mean")


def _number(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


@dataclass
class Thinned:
    """(step, value) pairs, at most `limit`: when full, every other one is dropped and
    from then on only every `stride`-th step offered is kept (a uniform thinning)."""

    limit: int = MAX_POINTS
    stride: int = 1
    offered: int = 0
    points: list[tuple[int, float]] = field(default_factory=list)

    def add(self, step: int, value: float) -> None:
        if self.points and step <= self.points[-1][0]:  # a restarted attempt re-logs steps
            self.points = [p for p in self.points if p[0] < step]
        self.offered += 1
        if (self.offered - 1) % self.stride:
            return
        self.points.append((step, value))
        if len(self.points) > self.limit:
            self.points = self.points[::2]
            self.stride *= 2

    @property
    def values(self) -> list[float]:
        return [v for _, v in self.points]


@dataclass
class Curves:
    """One job's curves: the training loss, the eval loss, and EXTRA."""

    job_name: str
    loss: Thinned = field(default_factory=Thinned)
    eval_loss: Thinned = field(default_factory=Thinned)
    extra: dict[str, Thinned] = field(default_factory=lambda: {k: Thinned() for k in EXTRA})

    def add(self, event: dict[str, Any]) -> None:
        step = event.get("step")
        if not isinstance(step, int):
            return
        if event["event"] == "step":
            if (loss := _number(event.get("loss"))) is not None:
                self.loss.add(step, loss)
            for name, series in self.extra.items():
                if (value := _number(event.get(name))) is not None:
                    series.add(step, value)
        elif event["event"] == "eval" and (loss := _number(event.get("loss"))) is not None:
            self.eval_loss.add(step, loss)


def curves_of(job_name: str, events: Iterable[dict[str, Any]]) -> Curves:
    curves = Curves(job_name)
    for event in events:
        curves.add(event)
    return curves


def sparkline(values: list[float], width: int = SPARK_WIDTH) -> str:
    """`values` as one line of block characters, low to high ('' for none): at most
    `width` characters, each the mean of its share of the values."""
    if not values:
        return ""
    n = min(width, len(values))
    buckets = [values[i * len(values) // n : (i + 1) * len(values) // n] for i in range(n)]
    means = [sum(b) / len(b) for b in buckets]
    low, high = min(means), max(means)
    span = high - low or 1.0
    top = len(SPARK_BARS) - 1
    return "".join(SPARK_BARS[round((m - low) / span * top)] for m in means)
