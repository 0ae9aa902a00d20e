"""Activation checkpointing, compile, CPU offload and the MFU table: the decisions and
their effect on the math, on CPU."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch._dynamo.utils import counters
from torch.distributed.fsdp import CPUOffloadPolicy
from torch.utils.checkpoint import CheckpointPolicy

from tests.trainer.conftest import train_here
from trainer import metrics
from trainer.config import ModelConfig, RopeScaling
from trainer.model import Transformer, llama3_scaled_inv_freq, num_params
from trainer.parallel import (
    SAVED_OPS,
    _save_expensive_ops,
    apply_activation_checkpointing,
    apply_compile,
    checkpoint_fn,
    fsdp_units,
    offload_policy,
)

CFG = ModelConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=97, max_seq_len=32)


def grads_with(mode: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = Transformer(CFG)
    apply_activation_checkpointing(model, mode)
    tokens = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(1))
    loss = torch.nn.functional.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten())
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("mode", ["selective", "full"])
def test_activation_checkpointing_recomputes_without_changing_the_gradients(mode):
    ref_loss, ref = grads_with("none")
    loss, got = grads_with(mode)
    assert loss == ref_loss
    for name in ref:
        torch.testing.assert_close(got[name], ref[name], rtol=1e-5, atol=1e-6)


def test_checkpointing_keeps_hf_parameter_names():
    model = Transformer(CFG)
    names = [n for n, _ in model.named_parameters()]
    apply_activation_checkpointing(model, "full")
    assert [n for n, _ in model.named_parameters()] == names


def test_checkpoint_modes():
    assert checkpoint_fn("none") is None
    assert checkpoint_fn("full").keywords == {"use_reentrant": False}
    assert "context_fn" in checkpoint_fn("selective").keywords
    with pytest.raises(ValueError):
        checkpoint_fn("some")


def test_selective_policy_saves_matmuls_and_attention_and_recomputes_the_rest():
    aten = torch.ops.aten
    for op in SAVED_OPS:
        assert _save_expensive_ops(None, op) == CheckpointPolicy.MUST_SAVE
    for op in (aten.mul.Tensor, aten.silu.default, aten.rsqrt.default, aten.add.Tensor):
        assert _save_expensive_ops(None, op) == CheckpointPolicy.PREFER_RECOMPUTE


def test_compile_wraps_each_block_and_keeps_names():
    model = Transformer(CFG)
    names = [n for n, _ in model.named_parameters()]
    apply_compile(model)  # lazy: nothing is compiled until the first forward
    assert all(block._compiled_call_impl is not None for block in model.layers)
    assert [n for n, _ in model.named_parameters()] == names


def test_cpu_offload_policy_is_chosen_only_when_asked():
    assert isinstance(offload_policy(True), CPUOffloadPolicy)
    assert offload_policy(False) is None
    # Pinned host memory where a GPU copies from it; a CPU run cannot pin (no CUDA).
    pinned, unpinned = offload_policy(True), offload_policy(True, pin_memory=False)
    assert pinned is not None and pinned.pin_memory
    assert unpinned is not None and not unpinned.pin_memory


def test_llama3_rope_scaling_keeps_high_and_divides_low_frequencies():
    scaling = RopeScaling(
        factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=64
    )
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, 32, 2, dtype=torch.float32) / 32))
    scaled = llama3_scaled_inv_freq(inv_freq, scaling)
    wavelen = 2 * torch.pi / inv_freq
    short, long = wavelen < 64 / 4, wavelen > 64 / 1
    assert torch.equal(scaled[short], inv_freq[short])
    torch.testing.assert_close(scaled[long], inv_freq[long] / 8)
    between = ~(short | long)
    assert between.any()  # the smooth band exists at these settings
    assert ((scaled[between] < inv_freq[between]) & (scaled[between] > inv_freq[between] / 8)).all()


@pytest.mark.parametrize(("name", "flops"), metrics.GPU_PEAK_BF16_FLOPS)
def test_every_gpu_in_the_peak_table_is_found_by_its_device_name(name, flops):
    # The names torch.cuda.get_device_name() reports, e.g. "NVIDIA H100 80GB HBM3".
    assert metrics.peak_flops(f"NVIDIA {name} 80GB") == flops


def test_specific_names_win_and_unknown_devices_have_no_peak():
    assert metrics.peak_flops("NVIDIA H100 PCIe") == 756e12
    assert metrics.peak_flops("NVIDIA L40S") == 362e12  # not L4
    assert metrics.peak_flops("NVIDIA A10G") == 125e12
    assert metrics.peak_flops("Some Future GPU") is None
    assert metrics.peak_flops(None) is None
    assert metrics.mfu(1000.0, 1e9, None) is None


def test_mfu_is_achieved_over_peak_flops():
    per_token = metrics.flops_per_token(800, n_layers=2, attention_dim=8, seq_len=16)
    assert per_token == 6 * 800 + 12 * 2 * 8 * 16
    assert metrics.mfu(tokens_per_s_per_device=1e6, flops_per_tok=per_token, peak=1e12) == (
        pytest.approx(1e6 * per_token / 1e12)
    )


# Real shapes of each family's config.json, and the queries' width counted by hand.
ATTENTION_WIDTHS = [
    ({"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32}, 32 * 128),
    ({"model_type": "qwen3", "hidden_size": 1024, "num_attention_heads": 16,
      "head_dim": 128}, 16 * 128),  # Qwen3-0.6B: not its hidden size 1024
    ({"model_type": "qwen3", "hidden_size": 4096, "num_attention_heads": 32,
      "head_dim": 128}, 32 * 128),  # Qwen3-8B
    ({"model_type": "gemma2", "hidden_size": 2304, "num_attention_heads": 8,
      "head_dim": 256}, 8 * 256),  # Gemma 2 2B: not 2304
    ({"model_type": "gpt2", "n_embd": 768, "n_head": 12}, 12 * 64),
]  # fmt: skip


@pytest.mark.parametrize(("shape", "width"), ATTENTION_WIDTHS)
def test_attention_flops_count_the_queries_width_of_every_family(shape, width):
    from trainer.hf_config import model_config_from_hf

    hf = {**shape, "num_hidden_layers": 2, "intermediate_size": 64, "vocab_size": 97,
          "num_key_value_heads": 2, "tie_word_embeddings": False}  # fmt: skip
    cfg = model_config_from_hf(hf)
    assert cfg.attention_dim == width
    attention = metrics.flops_per_token(0, cfg.n_layers, cfg.attention_dim, seq_len=4096)
    assert attention == 12 * 2 * width * 4096


# Inductor, loaded in this process, uses torch.jit.script_method (torch's own, not ours).
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_compiled_blocks_with_selective_checkpointing_train_like_eager(capsys, no_dist_env):
    # A real run through inductor (CPU codegen): same loss, same gradients as eager.
    # Both runs in this process, a world of one (a process of its own for the compiled
    # run cost another torch import, ~3 CPU-s); dynamo's caches are dropped after it.
    # One block: the second of the default two is the same code compiled again (~6 of
    # ~30 CPU-s measured with a cold inductor cache), not another path.
    args = ["--max_steps", "2", "--log_freq", "1", "--validation_freq", "0", "--n_layers", "1"]
    code, eager = train_here(capsys, args)
    assert code == 0, eager[-1]
    counters.clear()
    try:
        code, compiled = train_here(
            capsys, [*args, "--compile", "--activation_checkpointing", "selective"]
        )
        graphs = counters["stats"]["unique_graphs"]
    finally:
        torch._dynamo.reset()
    assert code == 0, compiled[-1]
    assert graphs >= 1  # dynamo did capture the block
    loss = {e["step"]: e["loss"] for e in eager if e["event"] == "step"}
    loss_compiled = {e["step"]: e["loss"] for e in compiled if e["event"] == "step"}
    assert loss_compiled[1] == pytest.approx(loss[1], abs=1e-4)
    assert loss_compiled[2] == pytest.approx(loss[2], abs=1e-3)


@pytest.mark.parametrize("tied", [False, True])
def test_mfu_counts_lm_head_as_a_matmul_also_when_tied(tied):
    cfg = ModelConfig(**{**CFG.__dict__, "tie_word_embeddings": tied})
    model = Transformer(cfg)
    embedding = cfg.vocab_size * cfg.dim
    # Every Linear's weight does a matmul (lm_head included); the embedding lookup does
    # not, but when tied its matrix IS lm_head's weight, counted once in the model.
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    norms = sum(p.numel() for n, p in model.named_parameters() if p.ndim == 1)
    assert metrics.matmul_params(num_params(model), cfg.vocab_size, cfg.dim, tied) == (
        linear + norms
    )
    assert num_params(model) == linear + norms + (0 if tied else embedding)


def test_the_peak_table_covers_every_gpu_of_the_catalogue():
    from skills.catalog.instances import GPUS, INSTANCES

    # torch.cuda.get_device_name() spells them "NVIDIA <name>...".
    for gpu in GPUS:
        assert metrics.peak_flops(f"NVIDIA {gpu.name}") is not None, gpu.name
    assert {i.gpu for i in INSTANCES} <= {g.name for g in GPUS}
    assert metrics.peak_flops("NVIDIA H100 NVL") == 835e12
    assert metrics.peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert metrics.peak_flops("NVIDIA RTX PRO 6000 Blackwell Server Edition") == 503.8e12


def test_cuda_memory_fields_report_peak_reserved_and_allocation_retries():
    stats = {
        "allocated_bytes.all.peak": 3 * 2**30,
        "reserved_bytes.all.peak": 5 * 2**30,
        "num_alloc_retries": 2,
    }
    assert metrics.cuda_memory_fields(stats) == {
        "mem_mb": 3072.0,
        "mem_reserved_mb": 5120.0,
        "alloc_retries": 2,
    }
    assert set(metrics.memory_stats("cpu")) == {"mem_mb"}


def test_embedding_and_norm_with_lm_head_are_fsdp_units_of_their_own():
    model = Transformer(CFG)
    units = fsdp_units(model)
    assert [modules for modules, _ in units] == [
        [model.embed_tokens],
        *[[block] for block in model.layers],
        [model.norm, model.lm_head],
    ]
    # Only the last unit keeps its params gathered after forward: backward needs them next.
    assert [reshard for _, reshard in units] == [True, True, True, False]


def test_tied_embeddings_stay_with_the_root():
    # One parameter shared by the embedding and lm_head cannot live in two units.
    model = Transformer(ModelConfig(**{**CFG.__dict__, "tie_word_embeddings": True}))
    units = fsdp_units(model)
    assert [modules for modules, _ in units] == [[block] for block in model.layers]
    assert [reshard for _, reshard in units] == [True, False]


def _short_timeout_rank(rank: int, store_path: str, waited: str) -> None:
    import time
    from datetime import timedelta

    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy

    from trainer.distributed import shorten_timeout
    from trainer.parallel import apply_fsdp, build_mesh, training_groups

    dist.init_process_group("gloo", store=dist.FileStore(store_path, 4), rank=rank, world_size=4)
    try:
        # HSDP, 2 nodes of 2: neither dimension spans the world (a group that did would
        # be the default group itself).
        mesh = build_mesh("cpu", "hybrid", 4, 2)
        model = apply_fsdp(Transformer(CFG), mesh, MixedPrecisionPolicy(), True)
        groups = training_groups(model)
        replicate = mesh.get_group("dp_replicate")
        assert dist.group.WORLD in groups and replicate in groups
        assert mesh.get_group("dp_shard") in groups
        shorten_timeout(groups, timedelta(seconds=1))
        if rank != 0:  # rank 2, rank 0's replica peer, hangs: never joins its all-reduce
            time.sleep(6)
            return
        start = time.monotonic()
        with pytest.raises(RuntimeError):
            dist.all_reduce(torch.ones(1), group=replicate)
        with open(waited, "w") as f:
            f.write(str(time.monotonic() - start))
    finally:
        dist.destroy_process_group()


def test_the_shortened_timeout_reaches_the_hsdp_groups(tmp_path):
    """After the first step a hang must fail within TRAIN_TIMEOUT on every group a step
    uses: HSDP's replicate group kept the first timeout (10 minutes) before."""
    from tests.trainer.conftest import spawn

    waited = tmp_path / "waited"
    spawn(_short_timeout_rank, (str(tmp_path / "store"), str(waited)), 4)
    assert float(waited.read_text()) < 5
