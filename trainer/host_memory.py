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
reused from a heap.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Mapping

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
