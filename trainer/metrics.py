"""The JSON-line protocol on stdout.

Rank 0 writes one `json.dumps` object per line and flushes, so a launcher tailing the
log sees each line as soon as it is written. Events: start, step, summary, error.
Nothing else may go to stdout; warnings and tracebacks go to stderr.
"""

from __future__ import annotations

import json
import math
import resource
import sys
from typing import Any, TextIO

import torch


def _clean(value: Any) -> Any:
    # json.dumps would write NaN/Infinity, which is not JSON; such values are
    # reported as null (the error line explains what happened).
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def format_line(event: str, **fields: Any) -> str:
    payload = {"event": event, **{k: _clean(v) for k, v in fields.items()}}
    return json.dumps(payload, allow_nan=False)


class MetricsEmitter:
    def __init__(self, rank: int, stream: TextIO | None = None) -> None:
        self.rank = rank
        self.stream = stream

    def emit(self, event: str, **fields: Any) -> None:
        if self.rank != 0:
            return
        stream = self.stream or sys.stdout  # looked up late so tests can capture it
        stream.write(format_line(event, **fields) + "\n")
        stream.flush()


def memory_mb(device_type: str) -> float:
    """Peak memory of this process: CUDA allocator peak on GPU, peak RSS on CPU."""
    if device_type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
