"""The process group's backend string, without torch: the trainer initialises it, and a
plan names it (skills/training_job_deployer reads this module, not the trainer's torch)."""

from __future__ import annotations


def process_group_backend(device_type: str, cpu_offload: bool) -> str:
    """NCCL on GPUs, gloo on CPU. A GPU run with cpu_offload has collectives on CPU
    tensors too (the gradient norm of CPU gradients), which NCCL cannot run: a gloo
    backend for them beside NCCL, as torchtitan initialises it."""
    if device_type != "cuda":
        return "gloo"
    return "cuda:nccl,cpu:gloo" if cpu_offload else "nccl"
