"""The baseline loop for benchmarks/trainer_bench.py, run under torchrun.

The least a FSDP2 training step can do: fully_shard per block then the root, AdamW,
forward, cross-entropy, backward, step. No data pipeline (pre-made random batches),
no clipping, no metrics, no checkpoints. `--impl hf` runs Hugging Face's
LlamaForCausalLM of the same dims under the same wrapping and loop.

Prints one JSON line from rank 0: {"impl", "step_s", "tokens_per_s"}.
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

from trainer.config_loader import load_config
from trainer.hf import hf_config_from_model
from trainer.model import Transformer
from trainer.parallel import apply_fsdp, build_mesh
from trainer.train import build_optimizer


def build(impl: str, cfg, mesh) -> torch.nn.Module:
    torch.manual_seed(cfg.seed)
    if impl == "ours":
        model = Transformer(cfg.model, rope_len=cfg.data.seq_len)
        return apply_fsdp(model, mesh, torch.distributed.fsdp.MixedPrecisionPolicy(), True)
    from transformers import LlamaConfig, LlamaForCausalLM

    hf_cfg = LlamaConfig(**hf_config_from_model(cfg.model))
    model = LlamaForCausalLM(hf_cfg).float()
    layers = model.model.layers
    for i, layer in enumerate(layers):  # same rule as trainer.parallel.apply_fsdp
        fully_shard(layer, mesh=mesh, reshard_after_forward=i < len(layers) - 1)
    fully_shard(model, mesh=mesh)
    return model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--impl", choices=["ours", "hf"], default="ours")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    args, trainer_flags = parser.parse_known_args()
    cfg = load_config(trainer_flags, environ={})

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["LOCAL_WORLD_SIZE"])))
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    mesh = build_mesh("cpu", "full", world, world)
    model = build(args.impl, cfg, mesh)
    optimizer = build_optimizer(model, cfg)

    gen = torch.Generator().manual_seed(dist.get_rank())
    shape = (cfg.train_batch_size, cfg.data.seq_len + 1)
    batches = [torch.randint(0, 259, shape, generator=gen) for _ in range(8)]

    def step(i: int) -> None:
        rows = batches[i % len(batches)]
        out = model(rows[:, :-1])
        logits = out if isinstance(out, torch.Tensor) else out.logits
        F.cross_entropy(logits.float().flatten(0, 1), rows[:, 1:].flatten()).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for i in range(args.warmup):
        step(i)
    dist.barrier()
    start = time.perf_counter()
    for i in range(args.steps):
        step(i)
    dist.barrier()
    step_s = (time.perf_counter() - start) / args.steps
    tokens = cfg.train_batch_size * cfg.data.seq_len * world
    if dist.get_rank() == 0:
        print(json.dumps({"impl": args.impl, "step_s": step_s, "tokens_per_s": tokens / step_s}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
