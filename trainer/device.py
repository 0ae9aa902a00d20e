"""Device, backend, dtype and thread decisions, as pure functions.

No function here touches CUDA: callers pass in what they observed
(`torch.cuda.is_available()`, `torch.cuda.is_bf16_supported()`, ...). That keeps the
GPU code paths unit-testable on a CPU-only machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy

from trainer.backends import process_group_backend


def choose_device_and_backend(
    cuda_available: bool, local_rank: int, cpu_offload: bool = False
) -> tuple[str, str]:
    """(device_type, process-group backend string)."""
    if local_rank < 0:
        raise ValueError(f"local_rank must be >= 0, got {local_rank}")
    device_type = "cuda" if cuda_available else "cpu"
    return device_type, process_group_backend(device_type, cpu_offload)


def device_for(device_type: str, local_rank: int, visible_gpus: int | None = None) -> torch.device:
    """One GPU per local rank; all CPU ranks share 'cpu'.

    `visible_gpus` (torch.cuda.device_count()): a launcher that gives each process
    one GPU of its own (CUDA_VISIBLE_DEVICES=<one id>, Slurm's --gpus-per-task=1) leaves
    it as cuda:0 whatever LOCAL_RANK is; cuda:LOCAL_RANK would be "invalid device
    ordinal". Otherwise local rank r takes GPU r, and one GPU too few is an error here,
    not a crash inside NCCL."""
    if device_type != "cuda":
        return torch.device("cpu")
    if visible_gpus is None or visible_gpus <= 0:
        return torch.device("cuda", local_rank)
    if visible_gpus == 1:
        return torch.device("cuda", 0)
    if local_rank >= visible_gpus:
        raise ValueError(
            f"LOCAL_RANK {local_rank} but this process sees {visible_gpus} GPUs: start "
            "at most one process per visible GPU (--gpu_per_node)"
        )
    return torch.device("cuda", local_rank)


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


def optimizer_flags(device_type: str, cpu_offload: bool = False) -> dict[str, bool]:
    """AdamW's implementation: the fused kernel for parameters on a GPU (one launch for
    all parameters, and it honours an on-device `found_inf`, so a non-finite step is
    skipped without a host sync); foreach for parameters in host memory, on CPU or
    offloaded from a GPU (the fused CPU kernel would read a GPU `found_inf` through a
    non-blocking copy it never waits for)."""
    if device_type == "cuda" and not cpu_offload:
        return {"fused": True}
    return {"foreach": True}


# NCCL's flight recorder: a ring of the last collectives per rank, dumped when a
# collective times out, so a hang names the rank and collective that stopped.
FLIGHT_RECORDER_ENTRIES = 20000


# The ring's size variable was renamed in torch 2.9 (TORCH_NCCL_TRACE_BUFFER_SIZE stays an
# alias that warns at every rank's start). Every torch of the supported range (2.11 through
# the newest, README) reads the new name, so it is the one set: no version test.
BUFFER_SIZE_VARIABLES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")


def flight_recorder_env(dump_dir: str, environ: dict[str, str]) -> dict[str, str]:
    """The variables to set before the NCCL process group exists (values the user set
    win, under either name of the ring's size). Dumps go to
    <dump_dir>/nccl_trace_rank_<rank>; both spellings of the dump path (TORCH_FR_* is the
    newer, TORCH_NCCL_DEBUG_INFO_TEMP_FILE the older) are set."""
    prefix = flight_recorder_prefix(dump_dir)
    wanted = {
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": prefix,
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix,
    }
    if not any(name in environ for name in BUFFER_SIZE_VARIABLES):
        wanted[BUFFER_SIZE_VARIABLES[0]] = str(FLIGHT_RECORDER_ENTRIES)
    return {k: v for k, v in wanted.items() if k not in environ}


def flight_recorder_prefix(dump_dir: str) -> str:
    return str(Path(dump_dir) / "nccl_trace_rank_")


def flight_recorder_dumps(environ: Any) -> str | None:
    """Where NCCL's flight recorder dumps on a timeout (one file per rank: the prefix
    and the rank), when this run has it on (trainer.device.flight_recorder_env)."""
    if environ.get("TORCH_NCCL_DUMP_ON_TIMEOUT") != "1":
        return None
    prefix = environ.get("TORCH_FR_DUMP_TEMP_FILE") or environ.get(
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
    )
    return f"{prefix}<rank>" if prefix else None
