"""The training loop, top to bottom.

    setup (process group, threads, seed) -> model -> FSDP2 -> AdamW + LR schedule
    -> loop: forward, loss, backward, clip, step, log -> summary -> teardown

`main()` is the one place where exceptions become a JSON error line and an exit code.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.elastic.multiprocessing.errors import get_error_handler
from torch.distributed.tensor import DTensor

from trainer import device as devices
from trainer.config import ConfigError, TrainConfig, parse_args
from trainer.data import ByteTokenizer, PackedBatches, load_documents, tokenize_documents
from trainer.metrics import MetricsEmitter, format_line, memory_mb
from trainer.model import Transformer, num_params
from trainer.parallel import apply_fsdp, build_mesh, reshard_after_forward

EXIT_CONFIG = 2
EXIT_FAILURE = 1


class NonFiniteLossError(RuntimeError):
    """Loss or gradient norm became NaN/inf: the run diverged."""


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits; torchrun sets these variables, a plain run has none."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    launched: bool  # under torchrun (or another env:// launcher)

    @classmethod
    def from_environ(cls, env: dict[str, str] | None = None) -> DistEnv:
        env = dict(os.environ if env is None else env)
        launched = "WORLD_SIZE" in env
        return cls(
            rank=int(env.get("RANK", 0)),
            world_size=int(env.get("WORLD_SIZE", 1)),
            local_rank=int(env.get("LOCAL_RANK", 0)),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", env.get("WORLD_SIZE", 1))),
            launched=launched,
        )


def init_distributed(backend: str, device: torch.device, env: DistEnv) -> None:
    if env.launched:
        # env:// rendezvous from MASTER_ADDR/PORT; device_id lets NCCL connect eagerly.
        device_id = device if device.type == "cuda" else None
        dist.init_process_group(backend=backend, device_id=device_id)
    else:
        # `python -m trainer`: a world of one. An in-memory store needs no port, so the
        # same FSDP code path runs with nothing to rendezvous with.
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)


def lr_factor(step: int, warmup_steps: int, max_steps: int, min_ratio: float = 0.1) -> float:
    """Multiplier on the peak LR for 0-based `step`: linear warmup, then cosine to 10%."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    # Weight decay on matrices only; decaying norm gains towards 0 only hurts.
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": cfg.optim.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=cfg.optim.learning_rate,
        betas=(0.9, 0.95),
    )


def _global_mean(value: torch.Tensor, world_size: int) -> float:
    # SUM then divide: gloo has no AVG reduce op.
    value = value.detach().float().clone()
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value.item() / world_size


def train(cfg: TrainConfig, env: DistEnv, emit: Callable[..., None]) -> dict[str, Any]:
    # --- device, threads, process group -------------------------------------------
    device_type, backend = devices.choose_device_and_backend(
        torch.cuda.is_available(), env.local_rank
    )
    device = devices.device_for(device_type, env.local_rank)
    if device_type == "cuda":
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(
            devices.choose_num_threads(
                os.cpu_count() or 1, env.local_world_size, os.environ.get("OMP_NUM_THREADS")
            )
        )
    init_distributed(backend, device, env)
    try:
        return _train(cfg, env, emit, device, backend)
    finally:
        dist.destroy_process_group()


def _train(
    cfg: TrainConfig,
    env: DistEnv,
    emit: Callable[..., None],
    device: torch.device,
    backend: str,
) -> dict[str, Any]:
    world_size = dist.get_world_size()
    bf16_ok = device.type == "cuda" and torch.cuda.is_bf16_supported()

    # --- data: every rank tokenizes the (small) corpus and takes its own windows ----
    tokenizer = ByteTokenizer()
    if cfg.model.vocab_size < tokenizer.n_vocab:
        raise ConfigError(
            f"model vocab_size {cfg.model.vocab_size} < tokenizer vocab {tokenizer.n_vocab}"
        )
    tokens = tokenize_documents(load_documents(cfg.data.dataset), tokenizer)
    try:
        batches = iter(
            PackedBatches(
                tokens, cfg.data.seq_len, cfg.train_batch_size, env.rank, world_size, cfg.seed
            )
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc

    # --- model: same seed on every rank -> identical init before sharding -----------
    # Built on CPU in fp32; fully_shard moves each rank's shard to `device`. (A later
    # change can build on the meta device for models too big for host memory.)
    torch.manual_seed(cfg.seed)
    model = Transformer(cfg.model)
    mesh = build_mesh(device.type, cfg.parallel.sharding_strategy, world_size, env.local_world_size)
    apply_fsdp(
        model,
        mesh,
        devices.mixed_precision_policy(device.type, bf16_ok),
        reshard_after_forward(cfg.parallel.sharding_strategy),
    )
    model.train()

    optimizer = build_optimizer(model, cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        partial(lr_factor, warmup_steps=cfg.optim.warmup_steps, max_steps=cfg.max_steps),
    )
    max_norm = cfg.optim.max_grad_norm or math.inf  # inf: measure the norm, never clip

    if cfg.output_dir and env.rank == 0:
        out = Path(cfg.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")

    tokens_per_step = cfg.train_batch_size * cfg.data.seq_len * world_size
    emit(
        "start",
        world_size=world_size,
        device=device.type,
        backend=backend,
        model_type=cfg.model_type,
        params=num_params(model),
        max_steps=cfg.max_steps,
        seq_len=cfg.data.seq_len,
        train_batch_size=cfg.train_batch_size,
        tokens_per_step=tokens_per_step,
    )

    # --- the loop -----------------------------------------------------------------
    start = time.perf_counter()
    now = interval_start = step1_end = start
    interval_tokens = 0
    first_loss = last_loss = math.nan
    for step in range(1, cfg.max_steps + 1):
        inputs, targets = next(batches)
        inputs = inputs.to(device, non_blocking=True)
        targets = targets.to(device, non_blocking=True)

        logits = model(inputs)
        # Loss in fp32 even when the model computes in bf16.
        loss = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten())
        loss.backward()
        grad_norm_t = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if isinstance(grad_norm_t, DTensor):  # FSDP2 grads are sharded DTensors
            grad_norm_t = grad_norm_t.full_tensor()
        grad_norm = float(grad_norm_t)

        # Every step: all ranks must agree on stopping, and this syncs the timing.
        step_loss = _global_mean(loss, world_size)
        if not (math.isfinite(step_loss) and math.isfinite(grad_norm)):
            raise NonFiniteLossError(
                f"non-finite loss {step_loss} / grad_norm {grad_norm} at step {step}; "
                "lower --learning_rate or raise --warmup_steps"
            )

        lr = scheduler.get_last_lr()[0]  # the LR this step is taken with
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()

        now = time.perf_counter()
        interval_tokens += tokens_per_step
        if step == 1:
            first_loss, step1_end = step_loss, now
        last_loss = step_loss
        # Step 1 is logged too, so the starting loss is always visible.
        if step == 1 or step % cfg.metrics.log_freq == 0 or step == cfg.max_steps:
            emit(
                "step",
                step=step,
                loss=round(step_loss, 5),
                lr=lr,
                grad_norm=round(grad_norm, 5),
                tokens_per_s=round(interval_tokens / max(now - interval_start, 1e-9), 1),
                tokens=step * tokens_per_step,
                elapsed_s=round(now - start, 3),
                mem_mb=round(memory_mb(device.type), 1),
            )
            interval_start, interval_tokens = now, 0

    # --- summary ------------------------------------------------------------------
    elapsed = time.perf_counter() - start
    if cfg.max_steps > 1:  # step 1 pays for warm-up (allocations, first collectives)
        timed_tokens, timed_s = (cfg.max_steps - 1) * tokens_per_step, now - step1_end
    else:
        timed_tokens, timed_s = tokens_per_step, elapsed
    throughput = timed_tokens / max(timed_s, 1e-9)
    summary = {
        "steps": cfg.max_steps,
        "first_loss": round(first_loss, 5),
        "last_loss": round(last_loss, 5),
        "tokens_per_s": round(throughput, 1),
        "elapsed_s": round(elapsed, 3),
        "world_size": world_size,
    }
    emit("summary", **summary)
    return summary


def main(argv: list[str] | None = None) -> int:
    """Run a training job; returns the process exit code.

    Expected failures (bad config, divergence) become an error line and an exit code,
    and are written to torchrun's error file so its failure report names the cause.
    Anything else also gets an error line, then is re-raised so torchrun's `record`
    writes it to the error file and the traceback reaches stderr.
    """
    env = DistEnv.from_environ()
    metrics = MetricsEmitter(env.rank)

    def report(exc: BaseException) -> None:
        fields = {"error_type": type(exc).__name__, "message": str(exc)}
        if env.rank == 0:
            metrics.emit("error", **fields)
        else:  # stdout belongs to rank 0; other ranks still say what went wrong
            print(format_line("error", rank=env.rank, **fields), file=sys.stderr, flush=True)
        # A no-op unless torchrun set TORCHELASTIC_ERROR_FILE.
        get_error_handler().record_exception(exc)

    try:
        train(parse_args(argv), env, metrics.emit)
    except ConfigError as exc:
        report(exc)
        return EXIT_CONFIG
    except NonFiniteLossError as exc:
        report(exc)
        return EXIT_FAILURE
    except Exception as exc:
        report(exc)
        raise
    return 0
