"""Device/backend/dtype decisions are pure, so the GPU paths are tested on CPU."""

from __future__ import annotations

import pytest
import torch

from trainer import device as d
from trainer.parallel import mesh_shape, reshard_after_forward


def test_cuda_available_uses_cuda_and_nccl():
    assert d.choose_device_and_backend(cuda_available=True, local_rank=3) == ("cuda", "nccl")


def test_no_cuda_uses_cpu_and_gloo():
    assert d.choose_device_and_backend(cuda_available=False, local_rank=0) == ("cpu", "gloo")


def test_negative_local_rank_is_rejected():
    with pytest.raises(ValueError):
        d.choose_device_and_backend(cuda_available=True, local_rank=-1)


def test_each_gpu_rank_gets_its_own_device_and_cpu_ranks_share_cpu():
    assert d.device_for("cuda", 3) == torch.device("cuda", 3)
    assert d.device_for("cpu", 3) == torch.device("cpu")


def test_cuda_with_bf16_computes_in_bf16_and_reduces_in_fp32():
    assert d.choose_param_dtype("cuda", bf16_supported=True) == torch.bfloat16
    policy = d.mixed_precision_policy("cuda", bf16_supported=True)
    assert policy.param_dtype == torch.bfloat16
    assert policy.reduce_dtype == torch.float32


def test_cuda_without_bf16_stays_fp32():
    assert d.choose_param_dtype("cuda", bf16_supported=False) == torch.float32
    policy = d.mixed_precision_policy("cuda", bf16_supported=False)
    assert policy.param_dtype is None and policy.reduce_dtype is None


def test_cpu_stays_fp32_even_if_bf16_is_reported():
    assert d.choose_param_dtype("cpu", bf16_supported=True) == torch.float32
    assert d.mixed_precision_policy("cpu", bf16_supported=True).param_dtype is None


@pytest.mark.parametrize(
    ("cpus", "local_procs", "omp", "expected"),
    [
        (2, 2, None, 1),  # this box under torchrun: one core each
        (2, 1, None, 2),  # plain python: use both cores
        (16, 3, None, 5),
        (2, 4, None, 1),  # oversubscribed: never 0
        (16, 2, "3", 3),  # an explicit OMP_NUM_THREADS wins
        (16, 2, "junk", 8),
    ],
)
def test_cpu_threads_split_cores_between_local_processes(cpus, local_procs, omp, expected):
    assert d.choose_num_threads(cpus, local_procs, omp) == expected


@pytest.mark.parametrize(
    ("strategy", "shape", "reshard"),
    [
        ("full", (8,), True),
        ("shard_grad_op", (8,), False),
        ("hybrid", (2, 4), True),  # replicate across 2 nodes, shard over 4 local ranks
        ("no_shard", (8, 1), False),
    ],
)
def test_sharding_strategy_maps_to_mesh_and_reshard(strategy, shape, reshard):
    assert mesh_shape(strategy, world_size=8, local_world_size=4) == shape
    assert reshard_after_forward(strategy) is reshard


def test_hybrid_needs_whole_nodes():
    with pytest.raises(ValueError, match="multiple"):
        mesh_shape("hybrid", world_size=6, local_world_size=4)
