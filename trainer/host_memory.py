"""Host memory of a CPU run: a large tensor's pages go back to the OS when it is freed.

glibc serves an allocation above its mmap threshold with its own mapping (unmapped on
free), and below it from a heap, which keeps freed memory for reuse. The threshold starts
at 128 KiB and rises to the size of each large block freed (up to 32 MiB), so after the
first step the layers' weights, gradients and FSDP's all-gather and reduce-scatter buffers
(a few MiB each) land on heaps, spread over several arenas (gloo's and autograd's threads),
and the process's resident size stays at the step's high-water mark plus what
fragmentation adds: 1116 MiB at the first step of a 58M Llama on 2 ranks, 980 MiB with a
fixed 1 MiB threshold (the step's live tensors, unchanged, then set the peak). A GPU
run's tensors live in the GPU's caching allocator, so the trainer sets this on CPU runs.
The cost: a large block is mapped (and its pages zeroed) on every allocation instead of
reused from the heap.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Mapping

M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)
MMAP_THRESHOLD_BYTES = 1 << 20


def return_large_frees(environ: Mapping[str, str]) -> bool:
    """Fix glibc's mmap threshold at 1 MiB for this process. Returns whether it was set:
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
