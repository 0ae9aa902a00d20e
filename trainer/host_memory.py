"""Host memory of a CPU run: a large tensor's pages go back to the OS when it is freed.

glibc serves an allocation above its mmap threshold with its own mapping (unmapped on
free), and below it from a heap, which keeps freed memory for reuse. The threshold starts
at 128 KiB and rises to the size of each large block freed (up to 32 MiB), so after the
first step the layers' weights, gradients and FSDP's all-gather and reduce-scatter buffers
(a few MiB each) land on heaps, spread over several arenas (gloo's and autograd's threads),
and the process's resident size stays at the step's high-water mark plus what
fragmentation adds. Fixed at 8 MiB, the large blocks (the embedding's and head's
all-gathered weights and gradients, FSDP's per-unit buffers) are unmapped when freed, and
the peak is set by the step's live tensors: 1204 -> 1000 MiB at the first step of a 58M
Llama on 2 ranks (17% less; numbers below). A GPU
run's tensors live in the GPU's caching allocator, so the trainer sets this on CPU runs.
The cost: a block above 8 MiB is mapped (its pages zeroed) on every allocation instead of
reused from a heap: +7 ms of CPU a 12 MiB block here, +12% CPU a step of the bare loop
on debug_large, most of the trainer's 1.17-1.22x step time against it (issue 52). So the
trainer tunes only a run whose memory is tight (`memory_is_tight`: its ranks' estimated
need above half of what the host has available), where the lower peak is worth the
time; elsewhere glibc's default reuses the blocks. glibc's own MALLOC_MMAP_THRESHOLD_
sets the same threshold for any run.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Mapping
from pathlib import Path

from trainer.rules import STATE_BYTES_PER_PARAM

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)
# Measured (58M Llama, 2 CPU ranks, same run): glibc's default 1204 MiB at the first step,
# 8 MiB 1000 MiB at the same speed, 1 MiB 988 MiB but ~25% slower steps (every freed
# MiB-sized weight and gradient re-mapped and its pages zeroed on the next allocation).
MMAP_THRESHOLD_BYTES = 8 << 20


def return_large_frees(environ: Mapping[str, str]) -> bool:
    """Fix glibc's mmap threshold at 8 MiB for this process. Returns whether it was set:
    not where the user tunes malloc (MALLOC_* variables win) or libc is not glibc."""
    if any(name.startswith("MALLOC_") for name in environ):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to tune
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))


# A CPU rank's first-step need per parameter, conservatively unsharded: fp32 weights,
# gradients and both Adam moments (STATE_BYTES_PER_PARAM), plus the process's own
# ~0.5 GiB (torch, the data): the 58M Llama's first step peaked at 1.0-1.2 GiB a rank
# (README).
BASE_BYTES = 512 << 20


def memory_is_tight(n_params: int, ranks_on_host: int, available_bytes: int | None) -> bool:
    """Whether this host's CPU ranks may need more than half its available memory (an
    unknown amount counts as tight): then freed large blocks should leave the process."""
    if available_bytes is None:
        return True
    need = ranks_on_host * (STATE_BYTES_PER_PARAM * n_params + BASE_BYTES)
    return need > available_bytes // 2


def available_memory(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """MemAvailable of this host (or of its cgroup's view), in bytes; None if unknown."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
