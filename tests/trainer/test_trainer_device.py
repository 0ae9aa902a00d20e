"""Device/backend/dtype decisions are pure, so the GPU paths are tested on CPU."""

from __future__ import annotations

import pytest
import torch

from trainer import device as d
from trainer.parallel import mesh_shape, reshard_after_forward
from trainer.rules import resolve_strategy
from trainer.threads import choose_num_threads


def test_cuda_available_uses_cuda_and_nccl():
    assert d.choose_device_and_backend(cuda_available=True, local_rank=3) == ("cuda", "nccl")


def test_no_cuda_uses_cpu_and_gloo():
    assert d.choose_device_and_backend(cuda_available=False, local_rank=0) == ("cpu", "gloo")


@pytest.mark.parametrize(
    ("cuda", "cpu_offload", "backend"),
    [
        (True, False, "nccl"),
        # Offloaded: the gradient norm's all-reduce is of CPU tensors, which NCCL cannot
        # run (the crash at step 1): gloo beside it, torchtitan's string.
        (True, True, "cuda:nccl,cpu:gloo"),
        (False, False, "gloo"),
        (False, True, "gloo"),
    ],
)
def test_the_backend_string_covers_every_device_a_runs_collectives_use(cuda, cpu_offload, backend):
    assert d.choose_device_and_backend(cuda, 0, cpu_offload)[1] == backend


@pytest.mark.parametrize(
    ("device_type", "cpu_offload", "flags"),
    [
        ("cuda", False, {"fused": True}),
        # Parameters in host memory: not the fused kernel (a GPU found_inf read without
        # waiting for its copy), foreach as on CPU.
        ("cuda", True, {"foreach": True}),
        ("cpu", False, {"foreach": True}),
        ("cpu", True, {"foreach": True}),
    ],
)
def test_offloaded_parameters_get_the_cpu_optimizer(device_type, cpu_offload, flags):
    assert d.optimizer_flags(device_type, cpu_offload) == flags


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
        (16, 2, " 3 ", 3),
        (16, 2, "0", 8),  # not a thread count (OpenMP ignores it too): the split
        (16, 2, "-2", 8),
        (16, 2, "", 8),
    ],
)
def test_cpu_threads_split_cores_between_local_processes(cpus, local_procs, omp, expected):
    assert choose_num_threads(cpus, local_procs, omp) == expected


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


@pytest.mark.parametrize(
    ("local_rank", "visible", "expected"),
    [
        (3, 1, 0),  # the launcher gave this process its one GPU: it is cuda:0
        (0, 1, 0),
        (3, 8, 3),  # all of the node's GPUs visible: local rank r takes GPU r
        (3, None, 3),  # count unknown: as before
    ],
)
def test_the_gpu_of_a_rank_follows_what_it_can_see(local_rank, visible, expected):
    assert d.device_for("cuda", local_rank, visible) == torch.device("cuda", expected)


def test_more_local_ranks_than_visible_gpus_is_an_error_not_an_invalid_ordinal():
    with pytest.raises(ValueError, match="LOCAL_RANK 4 but this process sees 2 GPUs"):
        d.device_for("cuda", 4, 2)


def test_fused_adamw_on_cuda_and_foreach_on_cpu():
    assert d.optimizer_flags("cuda") == {"fused": True}
    assert d.optimizer_flags("cpu") == {"foreach": True}


def test_the_optimizer_is_built_with_the_devices_flags():
    from trainer.build import build_optimizer
    from trainer.config import TrainConfig

    model = torch.nn.Linear(4, 4)
    assert build_optimizer(model, TrainConfig(), "cuda").defaults["fused"] is True
    cpu = build_optimizer(model, TrainConfig(), "cpu").defaults
    assert cpu["foreach"] is True and not cpu["fused"]


def test_the_flight_recorder_dumps_on_timeout_and_leaves_set_variables_alone():
    env = d.flight_recorder_env("/runs/a/nccl_traces", {})
    assert env == {
        "TORCH_FR_BUFFER_SIZE": str(d.FLIGHT_RECORDER_ENTRIES),
        "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
        "TORCH_FR_DUMP_TEMP_FILE": "/runs/a/nccl_traces/nccl_trace_rank_",
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "/runs/a/nccl_traces/nccl_trace_rank_",
    }
    # A size the user set under either name is theirs: neither name is added beside it.
    for name in d.BUFFER_SIZE_VARIABLES:
        mine = d.flight_recorder_env("/x", {name: "0"})
        assert not set(mine) & set(d.BUFFER_SIZE_VARIABLES) and len(mine) == 3


def test_the_torch_support_is_kept_by_what_torch_has_not_by_its_version_string():
    # No module of the trainer reads torch's version: what differs between releases is
    # found by presence (the ring's name needs no test: 2.11 and later all read it).
    import pathlib

    trainer = pathlib.Path(d.__file__).parent
    readers = [p.name for p in trainer.glob("*.py") if "__version__" in p.read_text()]
    assert readers == []


@pytest.mark.parametrize(
    ("world", "local", "strategy"),
    [(16, 8, "hybrid"), (8, 8, "full"), (2, 2, "full"), (1, 1, "full"), (12, 8, "full")],
)
def test_auto_sharding_is_hybrid_across_nodes(world, local, strategy):
    assert resolve_strategy("auto", world, local) == strategy
    assert resolve_strategy("shard_grad_op", world, local) == "shard_grad_op"


def test_auto_shards_across_nodes_when_one_nodes_gpus_cannot_hold_the_state():
    gib = 2**30
    # 8B on 8 x 80 GB per node: 16 GB of state per GPU -> hybrid.
    assert resolve_strategy("auto", 16, 8, n_params=8 * 10**9, gpu_bytes=80 * gib) == "hybrid"
    # 70B: 140 GB per GPU within a node -> shard over every GPU.
    assert resolve_strategy("auto", 16, 8, n_params=70 * 10**9, gpu_bytes=80 * gib) == "full"


def test_auto_maps_to_the_mesh_of_what_it_resolves_to():
    assert mesh_shape("auto", world_size=16, local_world_size=8) == (2, 8)
    assert mesh_shape("auto", world_size=8, local_world_size=8) == (8,)
    assert reshard_after_forward("auto") is True


def test_the_error_file_names_where_the_flight_recorder_dumped(tmp_path, monkeypatch):
    import json

    from trainer.device import flight_recorder_dumps
    from trainer.train import record_error

    env = d.flight_recorder_env(str(tmp_path / "traces"), {})
    dumps = flight_recorder_dumps(env)
    assert dumps == f"{tmp_path}/traces/nccl_trace_rank_<rank>"
    assert flight_recorder_dumps({}) is None  # CPU runs: no flight recorder
    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    try:
        raise RuntimeError("Watchdog caught collective operation timeout")
    except RuntimeError as exc:
        record_error(exc, dumps)
    written = json.loads(error_file.read_text())["message"]
    assert written["message"] == "RuntimeError: Watchdog caught collective operation timeout"
    assert written["extraInfo"]["nccl_flight_recorder"] == dumps


@pytest.mark.parametrize("launched", [False, True])
@pytest.mark.parametrize(("device", "device_id"), [("cuda:3", "cuda:3"), ("cpu", None)])
def test_the_process_group_is_bound_to_the_ranks_gpu_in_every_launch(
    monkeypatch, launched, device, device_id
):
    """A world of one as well as torchrun's ranks: without device_id a GPU run's barrier
    warns that it guesses the device (seen on an H100 machine)."""
    from trainer import distributed

    calls: list[dict] = []
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda **kw: calls.append(kw))
    monkeypatch.delenv("TORCHELASTIC_USE_AGENT_STORE", raising=False)
    env = distributed.DistEnv(
        rank=0, world_size=2 if launched else 1, local_rank=0, local_world_size=1,
        launched=launched,
    )  # fmt: skip
    distributed.init_distributed("nccl", torch.device(device), env)
    (kwargs,) = calls
    assert kwargs["device_id"] == (torch.device(device_id) if device_id else None)


@pytest.mark.parametrize("max_norm", [0.5, 50.0])
def test_fused_adamw_clips_in_its_step_as_torchs_clip_does(max_norm):
    """On a GPU the clip is fused AdamW's grad_scale (no pass over the gradients of its
    own): three steps of gradients of very different norms end where torch's in-place clip
    and foreach AdamW end, and not where the unclipped steps end (fused AdamW runs on CPU
    too, so the same kernel family is checked here)."""
    import math

    from trainer.step import grad_norm_of

    def run(fused: bool, norm: float) -> torch.Tensor:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
        opt = torch.optim.AdamW(model.parameters(), lr=0.1, fused=fused, foreach=not fused)
        gen = torch.Generator().manual_seed(1)
        for scale in (1.0, 30.0, 0.1):
            (model(torch.randn(5, 8, generator=gen) * scale) ** 2).sum().backward()
            measured = grad_norm_of(model, norm, opt if fused else None)
            assert math.isfinite(float(measured))
            opt.step()
            opt.zero_grad()
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    clipped = run(False, max_norm)
    torch.testing.assert_close(run(True, max_norm), clipped, rtol=1e-5, atol=1e-5)
    assert (run(False, math.inf) - clipped).abs().max() > 1e-2
