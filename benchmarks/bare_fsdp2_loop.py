"""The baseline loop for benchmarks/trainer_bench.py and benchmarks/gpu_mfu.py, run
under torchrun (one process may run without it: a world of one, as the trainer runs).

The least a FSDP2 training step can do: fully_shard per block then the root, AdamW,
forward, cross-entropy over full logits, backward, step. No data pipeline (pre-made
random batches), no clipping, no metrics, no checkpoints. The device follows
availability, as the trainer's does: a GPU with NCCL, bf16 compute (fp32 reduction)
and fused AdamW where there is one, else CPU with gloo and fp32, so a GPU run compares
like with like. `--impl hf` runs Hugging Face's LlamaForCausalLM of the same dims
under the same wrapping and loop. `--impl family --model_name_or_path DIR` runs that
checkpoint's transformers class (any family) built the bare way: on `meta`, sharded per
decoder layer then the root, allocated, each parameter's full tensor read from the
safetensors and scattered (torch's distribute_tensor), RoPE tables recomputed.

Prints one JSON line from rank 0:
{"impl", "device", "step_s", "tokens_per_s", "tokens_per_s_per_device", "mfu",
"peak_first_step_mb"} (peak_first_step_mb: rank 0's peak up to its first optimizer step:
RSS on CPU, allocated on a GPU). `--rank_times_every N` adds what the trainer does to
name the slowest rank (trainer/rank_times.py: its clock thread, and one all_gather of
a float every N steps), for benchmarks/rank_times_cost.py; several, comma-separated,
run one after the other (as several --impl do). `--adds` does the same for each thing
the trainer adds to this loop, with the trainer's own functions (benchmarks/trainer_bench.py
prints the cost of each): `norm` the gradient norm and clip (trainer.step.grad_norm_of),
`head` the chunked cross-entropy head (the model's own loss, trainer/loss.py), `agree`
the one all-reduce of loss and flags and its read one step late (trainer.step.agree),
`ranks` the per-rank clock and its all_gather on every 10th step (trainer/rank_times.py),
`+`-joined for several at once; several variants comma-separated, one after the other.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.fsdp import fully_shard

from trainer import device as devices
from trainer import metrics
from trainer.build import build_optimizer
from trainer.config_loader import load_config
from trainer.distributed import DistEnv, StopRequest
from trainer.hf import hf_config_from_model
from trainer.model import Transformer, num_params
from trainer.parallel import apply_fsdp, build_mesh
from trainer.rank_times import RankTimes
from trainer.step import Agreement, agree, grad_norm_of
from trainer.threads import choose_num_threads

# What --adds may name (see the docstring); `none`: the bare loop itself.
ADDS = ("norm", "head", "agree", "ranks")
# The trainer's default log_freq: `ranks` gathers the clocks this often.
LOG_FREQ = 10


def setup() -> torch.device:
    """This rank's device and process group, chosen as the trainer chooses them."""
    env = DistEnv.from_environ()  # torchrun's variables, or none: a world of one
    cuda = torch.cuda.is_available()
    device_type, backend = devices.choose_device_and_backend(cuda, env.local_rank)
    visible = torch.cuda.device_count() if cuda else None
    device = devices.device_for(device_type, env.local_rank, visible)
    if cuda:
        torch.cuda.set_device(device)
    else:
        omp = os.environ.get("OMP_NUM_THREADS")
        torch.set_num_threads(choose_num_threads(os.cpu_count() or 1, env.local_world_size, omp))
    device_id = device if cuda else None
    if not env.launched:  # as the trainer runs it
        store = dist.HashStore()
        dist.init_process_group(backend, store=store, rank=0, world_size=1, device_id=device_id)
    else:
        dist.init_process_group(backend, device_id=device_id)
    return device


def build(impl: str, cfg, mesh, device: torch.device) -> torch.nn.Module:
    torch.manual_seed(cfg.seed)
    bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    policy = devices.mixed_precision_policy(device.type, bf16, cfg.parallel.reduce_dtype)
    if impl == "ours":
        with device:
            model = Transformer(cfg.model, rope_len=cfg.data.seq_len)
        # apply_fsdp sums gradients over ranks: the step divides by the global tokens.
        return apply_fsdp(model, mesh, policy, True)
    if impl == "family":
        return build_family(cfg.model_name_or_path, mesh, policy, device)
    from transformers import LlamaConfig, LlamaForCausalLM

    hf_cfg = LlamaConfig(**hf_config_from_model(cfg.model))
    model = LlamaForCausalLM(hf_cfg).float().to(device)
    layers = model.model.layers
    for i, layer in enumerate(layers):  # per block, the last one kept gathered
        fully_shard(layer, mesh=mesh, mp_policy=policy, reshard_after_forward=i < len(layers) - 1)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    for module in model.modules():  # summed over ranks, as apply_fsdp does
        if hasattr(module, "set_gradient_divide_factor"):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    return model


def build_family(path: str, mesh, policy, device: torch.device) -> torch.nn.Module:
    """An HF checkpoint's own class, meta-initialised and sharded with no trainer code."""
    from safetensors import safe_open
    from torch.distributed.tensor import Shard, distribute_tensor
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path)
    config.use_cache = False
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
    persistent = set(model.state_dict())
    owners = {n.rpartition(".")[0] for n, _ in model.named_buffers() if n not in persistent}
    layers = max((m for m in model.modules() if isinstance(m, torch.nn.ModuleList)), key=len)
    for i, layer in enumerate(layers):
        fully_shard(layer, mesh=mesh, mp_policy=policy, reshard_after_forward=i < len(layers) - 1)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    for module in model.modules():
        if hasattr(module, "set_gradient_divide_factor"):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    model.to_empty(device=device)
    model.tie_weights()
    for name in owners:
        model._init_weights(model.get_submodule(name))
    params = dict(model.named_parameters())
    with torch.no_grad(), safe_open(f"{path}/model.safetensors", framework="pt") as f:
        for name in f.keys():
            if name in params:
                full = f.get_tensor(name).to(device)
                local = distribute_tensor(full, mesh, [Shard(0)]).to_local()
                params[name].to_local().copy_(local)
    return model


def peak_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def impls(text: str) -> list[str]:
    """`--impl`: one, or several comma-separated, run one after the other in the same
    process group (each its own model, optimizer and line: benchmarks/trainer_bench.py's
    quick mode saves a launch that way; a later one's peak includes the earlier ones')."""
    names = text.split(",")
    unknown = [n for n in names if n not in ("ours", "hf", "family")]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown --impl {unknown}: ours, hf or family")
    return names


def everys(text: str) -> list[int]:
    """`--rank_times_every`: one, or several comma-separated (0: off), run one after the
    other in the same process group (benchmarks/rank_times_cost.py's quick mode saves a
    launch that way)."""
    return [int(n) for n in text.split(",")]


def adds(text: str) -> list[frozenset[str]]:
    """`--adds`: variants, comma-separated, each a `+`-joined set of ADDS (or `none`)."""
    variants = [frozenset(v.split("+")) - {"none"} for v in text.split(",")]
    unknown = sorted(set().union(*variants) - set(ADDS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown --adds {unknown}: none or {', '.join(ADDS)}")
    return variants


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", type=impls, default=["ours"])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rank_times_every", type=everys, default=[0])
    parser.add_argument("--adds", type=adds, default=[frozenset()])
    args, trainer_flags = parser.parse_known_args()
    cfg = load_config(trainer_flags, environ={})

    device = setup()
    world = dist.get_world_size()
    mesh = build_mesh(device.type, "full", world, world)
    for impl in args.impl:
        for every in args.rank_times_every:
            for added in args.adds:
                line = run(impl, every, args, cfg, mesh, device, added)
                if dist.get_rank() == 0:
                    print(json.dumps(line), flush=True)
    dist.destroy_process_group()


def run(
    impl: str,
    every: int,
    args: argparse.Namespace,
    cfg,
    mesh,
    device: torch.device,
    added: frozenset[str] = frozenset(),
) -> dict:
    """Warm-up, then --steps timed steps of `impl` (naming the slowest rank every
    `every` steps, 0: never) with the trainer's `added` pieces: the JSON line's fields."""
    world = dist.get_world_size()
    model = build(impl, cfg, mesh, device)
    optimizer = build_optimizer(model, cfg, device.type)

    gen = torch.Generator().manual_seed(dist.get_rank())
    shape = (cfg.train_batch_size, cfg.data.seq_len + 1)
    vocab = min(cfg.model.vocab_size, 259)
    batches = [torch.randint(0, vocab, shape, generator=gen).to(device) for _ in range(8)]
    global_tokens = cfg.train_batch_size * cfg.data.seq_len * world

    if "ranks" in added:
        every = every or LOG_FREQ
    ranks = RankTimes(device, 0) if every else None
    fused = bool(optimizer.defaults.get("fused"))
    stop, late = StopRequest(), [None]

    def step(i: int) -> None:
        if ranks is not None and i % every == 0:
            ranks.window(i)
        rows = batches[i % len(batches)]
        if "head" in added and impl == "ours":  # the chunked head's summed loss
            loss = model(rows[:, :-1], rows[:, 1:]) / global_tokens
        else:
            out = model(rows[:, :-1])
            logits = out if isinstance(out, torch.Tensor) else out.logits
            flat = logits.float().flatten(0, 1)
            loss = F.cross_entropy(flat, rows[:, 1:].flatten(), reduction="sum") / global_tokens
        loss.backward()
        norm = torch.zeros((), device=device)
        if "norm" in added:
            norm = grad_norm_of(model, 1.0, optimizer if fused else None)
        if "agree" in added:
            agreement, found_inf = agree(i, loss.detach(), norm, stop, None)
            if fused:
                optimizer.found_inf = found_inf  # type: ignore[attr-defined]
            if isinstance(late[0], Agreement):  # the last step's values, read now
                late[0].resolve()
            late[0] = agreement
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        dist.barrier()

    step(0)
    first_peak = peak_mb(device)
    for i in range(1, args.warmup):
        step(i)
    sync()
    start, cpu_start = time.perf_counter(), time.process_time()
    for i in range(args.steps):
        step(i)
    sync()
    step_s = (time.perf_counter() - start) / args.steps
    # This process's CPU seconds a step (all its threads): on a CPU host shared with other
    # work, a figure that other processes' load moves far less than the wall clock.
    cpu_s = (time.process_time() - cpu_start) / args.steps
    if ranks is not None:  # its clock thread stops: a later run in this process has none
        ranks.close()
    per_device = global_tokens / step_s / world
    m = cfg.model
    flops = metrics.flops_per_token(
        metrics.matmul_params(num_params(model), m.vocab_size, m.dim, m.tie_word_embeddings),
        m.n_layers,
        m.attention_dim,
        cfg.data.seq_len,
    )
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    mfu = metrics.mfu(per_device, flops, metrics.peak_flops(name))
    return {
        "impl": impl,
        "device": name or "cpu",
        "step_s": step_s,
        "cpu_s_per_step": cpu_s,
        "tokens_per_s": global_tokens / step_s,
        "tokens_per_s_per_device": per_device,
        "mfu": mfu,
        "peak_first_step_mb": round(first_peak, 1),
        "peak_mb": round(peak_mb(device), 1),
        "reserved_mb": (
            round(torch.cuda.max_memory_reserved(device) / 2**20, 1)
            if device.type == "cuda"
            else None
        ),
        "rank_times_every": every,
        "adds": "+".join(sorted(added)) or "none",
    }


if __name__ == "__main__":
    main()
