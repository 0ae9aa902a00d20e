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
from collections.abc import Callable
from typing import Any, TextIO

import torch

# What the trainer reports through: emit("step", loss=..., ...) (MetricsEmitter.emit,
# wrapped by the trackers that watch the events).
Emit = Callable[..., None]


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


def memory_stats(device_type: str) -> dict[str, float | int]:
    """The step line's memory fields: peak allocated MiB (peak RSS on CPU) and, on a
    GPU, the allocator's reserved MiB and its allocation retries (a retry means it had
    to free its cache and try again: memory is nearly full and steps slow down)."""
    if device_type == "cuda":
        return cuda_memory_fields(torch.cuda.memory_stats())
    # ru_maxrss is in KiB on Linux.
    return {"mem_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def cuda_memory_fields(stats: dict[str, int]) -> dict[str, float | int]:
    """From torch.cuda.memory_stats(): what a step line reports."""
    return {
        "mem_mb": round(stats.get("allocated_bytes.all.peak", 0) / 2**20, 1),
        "mem_reserved_mb": round(stats.get("reserved_bytes.all.peak", 0) / 2**20, 1),
        "alloc_retries": int(stats.get("num_alloc_retries", 0)),
    }


# Dense bf16 tensor-core peak FLOP/s per GPU, from NVIDIA's datasheets (without
# sparsity). Matched against torch.cuda.get_device_name() by substring, first match
# wins, so more specific names come first. It covers every GPU of the deployer's
# catalogue (skills/catalog/instances.py GPUS; a test checks), which the trainer
# cannot import: it runs in the image without the suite.
GPU_PEAK_BF16_FLOPS: tuple[tuple[str, float], ...] = (
    ("GB200", 2.5e15),
    ("B200", 2.25e15),  # p6-b200
    ("RTX PRO 6000", 503.8e12),  # Blackwell Server Edition: its dense FP16/BF16 figure
    ("H200", 989e12),  # p5e/p5en
    ("H100 NVL", 835e12),
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


# Dense fp8 (e4m3) tensor-core peak FLOP/s, same sources and matching as the bf16 table;
# only GPUs with float8 tensor cores (SM 8.9+) are listed: --float8's MFU is also given
# against this peak (`mfu_fp8_peak`), beside the bf16 one.
GPU_PEAK_FP8_FLOPS: tuple[tuple[str, float], ...] = (
    ("GB200", 5e15),
    ("B200", 4.5e15),
    ("RTX PRO 6000", 1007.6e12),
    ("H200", 1979e12),
    ("H100 NVL", 1671e12),
    ("H100 PCIe", 1513e12),
    ("H100", 1979e12),
    ("L40S", 733e12),
    ("L4", 242.5e12),
)


def peak_fp8_flops(device_name: str | None) -> float | None:
    """Dense fp8 peak FLOP/s of one device, or None (CPU, or no float8 tensor cores)."""
    if not device_name:
        return None
    return next((flops for key, flops in GPU_PEAK_FP8_FLOPS if key in device_name), None)


def matmul_params(n_params: int, vocab_size: int, dim: int, tied: bool) -> int:
    """Weights that take part in a matmul: all but the embedding table, whose lookup is
    free. Tied embeddings count the shared matrix once in n_params, and it is lm_head's
    matmul weight too, so nothing is taken off (taking V*D off under-reported the Llama
    3.2 presets' MFU by 8-15%)."""
    return n_params if tied else n_params - vocab_size * dim


def flops_per_token(n_matmul_params: int, n_layers: int, attention_dim: int, seq_len: int) -> float:
    """Training FLOPs per token: 6 per matmul weight (forward 2, backward 4), plus
    attention's score and value matmuls, 12 * layers * attention_dim * seq_len (the PaLM
    appendix B formula, also torchtitan's; attention_dim is n_heads x head_dim,
    ModelConfig.attention_dim)."""
    return 6 * n_matmul_params + 12 * n_layers * attention_dim * seq_len


def mfu(tokens_per_s_per_device: float, flops_per_tok: float, peak: float | None) -> float | None:
    """Model FLOPs utilisation in [0, 1]; None where the peak is unknown (CPU)."""
    if peak is None:
        return None
    return tokens_per_s_per_device * flops_per_tok / peak
