"""What a run builds before its loop, in train.py's order: this rank's device and
threads, where to resume from, the model on the meta device, parallelized (float8,
activation checkpointing, compile, FSDP2), this rank's shard of the weights, AdamW and
its LR schedule, and the restored state of the newest complete checkpoint."""

from __future__ import annotations

import json
import math
import os
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from trainer import device as devices
from trainer import families, float8, hf, hub
from trainer.checkpoint import Checkpointer, staging_root
from trainer.config import ConfigError, TrainConfig
from trainer.distributed import DistEnv
from trainer.host_memory import available_memory, memory_is_tight, return_large_frees
from trainer.materialize import build_meta_model, init_random, materialize
from trainer.metrics import Emit
from trainer.model import Transformer, num_params
from trainer.parallel import (
    apply_activation_checkpointing,
    apply_compile,
    apply_fsdp,
    build_mesh,
    reshard_after_forward,
)
from trainer.rules import resolve_strategy
from trainer.stream import Batches
from trainer.threads import choose_num_threads
from trainer.tokenizer import Tokenizer
from trainer.train_state import (
    check_same_data_record,
    check_same_model,
    restore_train_state,
    train_state,
)

# --- setup ------------------------------------------------------------------------------


def setup_device(env: DistEnv, cpu_offload: bool = False) -> tuple[torch.device, str]:
    """This rank's device and process-group backend; CPU threads shared among ranks."""
    cuda = torch.cuda.is_available()
    device_type, backend = devices.choose_device_and_backend(cuda, env.local_rank, cpu_offload)
    try:
        device = devices.device_for(
            device_type, env.local_rank, torch.cuda.device_count() if cuda else None
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if device_type == "cuda":
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(
            choose_num_threads(
                os.cpu_count() or 1, env.local_world_size, os.environ.get("OMP_NUM_THREADS")
            )
        )
    return device, backend


def tune_host_memory(model: nn.Module, device: torch.device, env: DistEnv) -> None:
    """A CPU run whose memory is tight returns freed large tensors to the OS (a lower
    peak, at a page-zeroing cost per allocation: trainer/host_memory.py); others keep
    glibc's reuse. Before the model is allocated, so its blocks follow the choice."""
    if device.type == "cpu" and memory_is_tight(
        num_params(model), env.local_world_size, available_memory()
    ):
        return_large_frees(os.environ)


def trace_dir(cfg: TrainConfig) -> str:
    """Where NCCL's flight recorder dumps on a collective timeout: beside the run's
    files (output_dir, else a local checkpoint_dir), else the temp dir."""
    ckpt = cfg.checkpoint.checkpoint_dir
    base = cfg.output_dir or (ckpt if ckpt and not ckpt.startswith("s3://") else None)
    return str(Path(base or tempfile.gettempdir()) / "nccl_traces")


# --- checkpoints: where to resume from, found before anything big is built -------------


def build_checkpointer(
    cfg: TrainConfig, env: DistEnv, emit: Emit, tokenizer: Tokenizer, device_type: str = "cpu"
) -> tuple[Checkpointer | None, Path | None]:
    if not cfg.checkpoint.checkpoint_dir:
        return None, None
    staging = staging_root(cfg.output_dir, cfg.checkpoint.checkpoint_dir, env.local_rank)
    checkpointer = Checkpointer(
        cfg.checkpoint,
        dist.get_rank(),
        emit,
        cfg.to_dict(),
        tokenizer.files,
        staging,
        device_type=device_type,
        local_world_size=env.local_world_size,
    )
    resume_from = checkpointer.find_resumable()
    if resume_from is not None:
        check_same_model(resume_from, cfg)
    return checkpointer, resume_from


def restore(
    checkpointer: Checkpointer | None,
    resume_from: Path | None,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    batches: Batches,
) -> int:
    """The step to continue after: that of the checkpoint loaded, or 0."""
    if checkpointer is None or resume_from is None:
        return 0
    check_same_data_record(resume_from, batches)
    state = train_state(model, optimizer, scheduler, batches, 0)
    checkpointer.load(resume_from, state)
    try:
        return restore_train_state(state, model, optimizer, scheduler, batches)
    except ValueError as exc:  # the dataset, tokenizer, seq_len or seed changed
        raise ConfigError(
            f"cannot resume from {resume_from}: {exc}; use a new --checkpoint_dir "
            "(or a new job name) to start over"
        ) from exc


# --- model and parallelism --------------------------------------------------------------


def build_model(cfg: TrainConfig) -> nn.Module:
    """The model's structure on `meta`: no rank ever allocates the whole model. Our
    own Llama, or the transformers class of another family's checkpoint."""
    if cfg.model.hf_config is not None:
        source = cfg.model_name_or_path and hub.local_dir(cfg.model_name_or_path)
        return families.build_meta(cfg.model.hf_config, cfg.trust_remote_code, source)
    return build_meta_model(cfg.model, rope_len=cfg.data.seq_len)


def init_weights(model: nn.Module, cfg: TrainConfig, device: torch.device, resuming: bool) -> None:
    """Allocate this rank's shards and fill them: HF weights read per shard, else the
    seeded random init a full CPU build would give. A resume loads the checkpoint over
    them, so it leaves them uninitialized."""
    # With CPU offload the sharded parameters live in host memory.
    init_device = torch.device("cpu") if cfg.parallel.cpu_offload else device
    if isinstance(model, Transformer):
        materialize(model, init_device, device)
    else:
        families.materialize(model, init_device)
    if resuming:
        return
    if cfg.model_name_or_path:
        hf.load_hf_weights(model, cfg.model_name_or_path)
    elif isinstance(model, Transformer):
        init_random(model, cfg.seed, on_device=device.type == "cuda")
    else:  # a family preset (gpt2) trained from scratch
        families.init_random(model, cfg.seed)


def parallelize(
    model: nn.Module, cfg: TrainConfig, device: torch.device, env: DistEnv
) -> float8.Float8 | None:
    """Float8 linears, activation checkpointing, then compile, then FSDP2, in place
    (torchtitan's order). Returns what --float8 converted (None: off)."""
    world = dist.get_world_size()
    gpu_bytes = (
        torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else None
    )
    strategy = resolve_strategy(
        cfg.parallel.sharding_strategy, world, env.local_world_size, num_params(model), gpu_bytes
    )
    mesh = build_mesh(device.type, strategy, world, env.local_world_size)
    sharded = mesh["dp_shard"].size() > 1
    fp8 = float8.apply(model, device, sharded) if cfg.parallel.float8 else None
    apply_activation_checkpointing(model, cfg.parallel.activation_checkpointing)
    if cfg.parallel.compile:
        apply_compile(model)
    bf16_ok = device.type == "cuda" and torch.cuda.is_bf16_supported()
    apply_fsdp(
        model,
        mesh,
        devices.mixed_precision_policy(device.type, bf16_ok, cfg.parallel.reduce_dtype),
        reshard_after_forward(strategy),
        cpu_offload=cfg.parallel.cpu_offload,
    )
    model.train()
    return fp8


# --- optimizer ------------------------------------------------------------------------


def lr_factor(step: int, warmup_steps: int, max_steps: int, min_ratio: float = 0.1) -> float:
    """Multiplier on the peak LR for 0-based `step`: linear warmup, then cosine down to
    `min_ratio` (--min_lr_ratio, 10% by default)."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_optimizer(
    model: nn.Module, cfg: TrainConfig, device_type: str = "cpu"
) -> torch.optim.AdamW:
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
        **devices.optimizer_flags(device_type, cfg.parallel.cpu_offload),
    )


def build_lr_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig) -> Any:
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        partial(
            lr_factor,
            warmup_steps=cfg.optim.warmup_steps,
            max_steps=cfg.max_steps,
            min_ratio=cfg.optim.min_lr_ratio,
        ),
    )


def write_run_config(cfg: TrainConfig) -> None:
    if cfg.output_dir and dist.get_rank() == 0:
        out = Path(cfg.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")
