"""Device, backend, dtype and thread decisions, as pure functions.

No function here touches CUDA: callers pass in what they observed
(`torch.cuda.is_available()`, `torch.cuda.is_bf16_supported()`, ...). That keeps the
GPU code paths unit-testable on a CPU-only machine.
"""

from __future__ import annotations

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy


def choose_device_and_backend(cuda_available: bool, local_rank: int) -> tuple[str, str]:
    """(device_type, process-group backend): NCCL on GPUs, gloo on CPU."""
    if local_rank < 0:
        raise ValueError(f"local_rank must be >= 0, got {local_rank}")
    return ("cuda", "nccl") if cuda_available else ("cpu", "gloo")


def device_for(device_type: str, local_rank: int) -> torch.device:
    """One GPU per local rank; all CPU ranks share 'cpu'."""
    return torch.device("cuda", local_rank) if device_type == "cuda" else torch.device("cpu")


def choose_param_dtype(device_type: str, bf16_supported: bool) -> torch.dtype:
    """Dtype parameters are cast to for forward/backward.

    bf16 only where the hardware has it (Ampere+); CPU stays fp32 because CPU bf16
    matmuls are slow and the CPU runs exist for correctness, not speed.
    """
    if device_type == "cuda" and bf16_supported:
        return torch.bfloat16
    return torch.float32


def mixed_precision_policy(
    device_type: str, bf16_supported: bool, reduce_dtype: str = "float32"
) -> MixedPrecisionPolicy:
    """FSDP2 policy: compute in the chosen dtype, reduce gradients in `reduce_dtype`
    (fp32 unless asked otherwise).

    Sharded (master) parameters and optimizer state always stay fp32.
    """
    param_dtype = choose_param_dtype(device_type, bf16_supported)
    reduce = getattr(torch, reduce_dtype)
    if param_dtype == torch.float32 and reduce == torch.float32:
        return MixedPrecisionPolicy()  # no casting at all
    param = None if param_dtype == torch.float32 else param_dtype
    return MixedPrecisionPolicy(param_dtype=param, reduce_dtype=reduce)


def choose_num_threads(cpu_count: int, local_world_size: int, omp_num_threads: str | None) -> int:
    """Intra-op threads per process on CPU.

    An explicit OMP_NUM_THREADS wins. Otherwise split the cores evenly between the
    processes on this host: oversubscribing (2 procs x 2 threads on 2 cores) makes
    gloo collectives and matmuls fight for cores and is slower than 1 thread each.
    """
    if omp_num_threads:
        try:
            return max(1, int(omp_num_threads))
        except ValueError:
            pass
    return max(1, cpu_count // max(1, local_world_size))
