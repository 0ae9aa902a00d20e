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


# Dense bf16 tensor-core peak FLOP/s per GPU, from NVIDIA's datasheets (without
# sparsity). Matched against torch.cuda.get_device_name() by substring, first match
# wins, so more specific names come first.
GPU_PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("GB200", 2.5e15),
    ("B200", 2.25e15),
    ("H200", 989e12),
    ("H100 PCIe", 756e12),
    ("H100", 989e12),  # SXM (p5)
    ("A100", 312e12),  # p4d/p4de
    ("L40S", 362e12),  # g6e
    ("L4", 121e12),  # g6
    ("A10G", 125e12),  # g5; NVIDIA's A10 figure, the A10G has no public datasheet
    ("A10", 125e12),
    ("V100", 125e12),  # fp16 tensor cores (no bf16)
    ("T4", 65e12),  # g4dn; fp16
)


def peak_flops(device_name: str | None) -> float | None:
    """Peak FLOP/s of one device, or None (CPU, or a GPU not in the table)."""
    if not device_name:
        return None
    for key, flops in GPU_PEAK_BF16_FLOPS:
        if key in device_name:
            return flops
    return None


def flops_per_token(
    n_params: int, n_embedding_params: int, n_layers: int, dim: int, seq_len: int
) -> float:
    """Training FLOPs per token: 6 per weight (forward 2, backward 4) for every matmul
    weight, plus attention's score and value matmuls, 12 * layers * dim * seq_len
    (the PaLM appendix B formula, also torchtitan's). Embedding lookups are free."""
    return 6 * (n_params - n_embedding_params) + 12 * n_layers * dim * seq_len


def mfu(tokens_per_s_per_device: float, flops_per_tok: float, peak: float | None) -> float | None:
    """Model FLOPs utilisation in [0, 1]; None where the peak is unknown (CPU)."""
    if peak is None:
        return None
    return tokens_per_s_per_device * flops_per_tok / peak
