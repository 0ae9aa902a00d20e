"""The training run, top to bottom (torchtitan's order):

    setup (device, threads, process group)
    -> data (tokenize, pack, hold out)           build_data
    -> checkpoints: where to resume from         build_checkpointer
    -> model, on the meta device                 build_model
    -> parallelize: AC, compile, FSDP2           parallelize
    -> this rank's shard: HF weights or random   init_weights
    -> AdamW + LR schedule                       build_optimizer, build_lr_scheduler
    -> restore the newest complete checkpoint    restore
    -> loop of train_step, with hooks            TrainLoop: log, evaluate, checkpoint, stop
    -> summary -> teardown

`main()` is the one place where exceptions become a JSON error line and an exit code.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.elastic.multiprocessing.errors import get_error_handler
from torch.distributed.tensor import DTensor

from trainer import device as devices
from trainer import families, float8, gpu_telemetry, hf, hub, progress_status, tracking
from trainer import metrics as perf
from trainer.checkpoint import (
    Checkpointer,
    failure_summary,
    first_line,
    staging_root,
)
from trainer.config import ConfigError, TrainConfig, device_problems
from trainer.config_loader import load_config
from trainer.data import (
    HUB_SPLIT,
    IGNORE_INDEX,
    Batch,
    PackedBatches,
    Tokens,
    assistant_segments,
    chat_renderer,
    eval_batches,
    hub_documents,
    load_documents,
    split_tokens,
    tokenize_documents,
    tokenize_with_mask,
)
from trainer.distributed import (
    TRAIN_TIMEOUT,
    DistEnv,
    StopRequest,
    init_distributed,
    shorten_timeout,
)
from trainer.host_memory import available_memory, memory_is_tight, return_large_frees
from trainer.loss import global_valid_count
from trainer.materialize import build_meta_model, init_random, materialize
from trainer.metrics import MetricsEmitter, format_line, memory_stats
from trainer.model import Transformer, num_params
from trainer.parallel import (
    apply_activation_checkpointing,
    apply_compile,
    apply_fsdp,
    build_mesh,
    reshard_after_forward,
    resolve_strategy,
    training_groups,
)
from trainer.rank_times import RankTimes
from trainer.stream import Batches, StreamBatches
from trainer.threads import choose_num_threads
from trainer.token_cache import cached_tokens, open_mask, token_file, tokenizer_fingerprint
from trainer.tokenizer import Tokenizer, load_tokenizer
from trainer.train_state import (
    check_same_data_record,
    check_same_model,
    restore_train_state,
    train_state,
)

EXIT_CONFIG = 2
EXIT_FAILURE = 1
# SIGTERM handled: a checkpoint was saved. 128 + SIGTERM, the code Kubernetes and the
# Kubeflow ExitCode restart policy treat as retryable; distinct from the -15 of a
# process that was killed by the signal without saving.
EXIT_PREEMPTED = 143
# The error line's message: one line this long at most; the traceback goes to stderr.
MESSAGE_LIMIT = 300

Emit = Callable[..., None]


class NonFiniteLossError(RuntimeError):
    """Loss or gradient norm became NaN/inf: the run diverged."""


def train(
    cfg: TrainConfig, env: DistEnv, emit: Emit, stop: StopRequest | None = None
) -> dict[str, Any]:
    device, backend = setup_device(env, cfg.parallel.cpu_offload)
    if "nccl" in backend:  # before the process group exists, which reads them
        os.environ.update(devices.flight_recorder_env(trace_dir(cfg), dict(os.environ)))
    init_distributed(backend, device, env)
    try:
        summary = _train(cfg, env, emit, device, backend, stop or StopRequest())
        # No rank may tear down its gloo connections while another still uses them:
        # a peer that exits first can make the other abort at exit (SIGABRT).
        dist.barrier()
        return summary
    finally:
        dist.destroy_process_group()


def _train(
    cfg: TrainConfig,
    env: DistEnv,
    emit: Emit,
    device: torch.device,
    backend: str,
    stop: StopRequest,
) -> dict[str, Any]:
    if problems := device_problems(cfg, has_gpu=device.type == "cuda"):
        raise ConfigError("; ".join(problems))
    tokenizer = load_tokenizer(cfg.data.tokenizer)
    data = build_data(cfg, tokenizer, env)
    checkpointer, resume_from = build_checkpointer(cfg, env, emit, tokenizer, device.type)
    model = build_model(cfg)
    tune_host_memory(model, device, env)
    fp8 = parallelize(model, cfg, device, env)
    init_weights(model, cfg, device, resuming=resume_from is not None)
    optimizer = build_optimizer(model, cfg, device.type)
    scheduler = build_lr_scheduler(optimizer, cfg)
    step = restore(checkpointer, resume_from, model, optimizer, scheduler, data.batches)
    write_run_config(cfg)
    loop = TrainLoop(
        cfg, model, optimizer, scheduler, data, checkpointer, device, emit, stop, fp8
    )  # fmt: skip
    loop.emit_start(backend, step)
    return loop.run(step, resume_from)


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


# --- data -------------------------------------------------------------------------------


@dataclass
class Data:
    batches: Batches  # endless training micro-batches of this rank
    held_out: list[Batch]  # this rank's evaluation batches (may be empty)


def load_tokens(
    cfg: TrainConfig, tokenizer: Tokenizer, env: DistEnv
) -> tuple[Tokens, Tokens | None]:
    """The dataset's token stream and, with --train_on assistant, its loss mask. The
    bundled corpus is tokenized in memory (it is small); any other dataset once per
    host into a memory-mapped token file."""
    data = cfg.data
    masked = data.train_on == "assistant"
    chat = chat_renderer(tokenizer)

    def read_documents() -> list[Any]:
        render = assistant_segments(chat) if masked else chat
        return load_documents(data.dataset, data.dataset_config_name, render)

    if data.dataset is None:
        if masked:
            return tokenize_with_mask(read_documents(), tokenizer)
        return tokenize_documents(read_documents(), tokenizer), None
    path = token_file(
        data.dataset, data.dataset_config_name, tokenizer, data.tokenizer, train_on=data.train_on
    )
    tokens = cached_tokens(
        path, read_documents, tokenizer, env.local_rank, env.local_world_size, dist.barrier,
        masked,
    )  # fmt: skip
    return tokens, open_mask(path) if masked else None


def build_data(cfg: TrainConfig, tokenizer: Tokenizer, env: DistEnv) -> Data:
    """The token stream, cut into this rank's training windows and held-out batches."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if cfg.model.vocab_size < tokenizer.n_vocab:
        raise ConfigError(
            f"model vocab_size {cfg.model.vocab_size} < tokenizer vocab {tokenizer.n_vocab}; "
            f"pick a --model_type or --model_name_or_path whose vocabulary has at least "
            f"{tokenizer.n_vocab} entries, or another --tokenizer"
        )
    if hub.is_hub_id(cfg.data.dataset):
        return stream_data(cfg, tokenizer, rank, world_size)
    tokens, mask = load_tokens(cfg, tokenizer, env)
    train_tokens, val_tokens = split_tokens(tokens, cfg.data.validation_split)
    train_mask, val_mask = (
        (None, None) if mask is None else split_tokens(mask, cfg.data.validation_split)
    )
    try:
        batches = PackedBatches(
            train_tokens, cfg.data.seq_len, cfg.train_batch_size, rank, world_size, cfg.seed,
            train_mask,
        )  # fmt: skip
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    # A small held-out split may not fill a training-sized batch on every rank;
    # evaluate with smaller batches rather than not at all.
    val_windows = max(0, len(val_tokens) - 1) // (cfg.data.seq_len + 1)
    eval_batch = max(1, min(cfg.train_batch_size, val_windows // world_size))
    held_out = eval_batches(
        val_tokens, cfg.data.seq_len, eval_batch, rank, world_size,
        cfg.metrics.validation_batches, val_mask,
    )  # fmt: skip
    return Data(batches, held_out)


def stream_data(cfg: TrainConfig, tokenizer: Tokenizer, rank: int, world_size: int) -> Data:
    """A hub dataset, streamed: this rank's share packed as it is read. No held-out
    batches (a stream has no tail to hold out): validation_freq does nothing here."""
    data = cfg.data
    render = chat_renderer(tokenizer)
    if data.train_on == "assistant":
        render = assistant_segments(render)

    def documents() -> Iterator[Any]:
        return hub_documents(data.dataset or "", data.dataset_config_name, render, rank, world_size)

    # What the checkpointed position counts windows of: a checkpoint of another is refused.
    identity = {"dataset": data.dataset, "config": data.dataset_config_name, "split": HUB_SPLIT,
                "tokenizer": tokenizer_fingerprint(tokenizer, data.tokenizer)}  # fmt: skip
    batches = StreamBatches(
        documents, tokenizer, data.seq_len, cfg.train_batch_size, world_size,
        masked=data.train_on == "assistant", identity=identity,
    )  # fmt: skip
    return Data(batches, [])


# --- checkpoints: where to resume from, found before anything big is built -------------


def build_checkpointer(
    cfg: TrainConfig, env: DistEnv, emit: Emit, tokenizer: Tokenizer, device_type: str = "cpu"
) -> tuple[Checkpointer | None, Path | None]:
    if not cfg.checkpoint.checkpoint_dir:
        return None, None
    staging = staging_root(cfg.output_dir, cfg.checkpoint.checkpoint_dir, env.local_rank)
    checkpointer = Checkpointer(
        cfg.checkpoint, dist.get_rank(), emit, cfg.to_dict(), tokenizer.files, staging,
        device_type=device_type, local_world_size=env.local_world_size,
    )  # fmt: skip
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


# --- one step -------------------------------------------------------------------------


def train_step(
    model: nn.Module, batches: Batches, accum: int, device: torch.device, tokens: int
) -> torch.Tensor:
    """Forward and backward over `accum` micro-batches. Each micro-batch's summed loss is
    divided by the trained-on targets of the whole step on all ranks (`tokens` of them
    when nothing is masked), and FSDP sums gradients over ranks: every world size and
    accumulation split gives the same gradients. Returns this rank's share of the global
    mean loss (a tensor: reading it would wait for the device)."""
    micro = [next(batches) for _ in range(accum)]
    moved = [(x.to(device, non_blocking=True), y.to(device, non_blocking=True)) for x, y in micro]
    count = global_valid_count([y for _, y in moved], batches.masked, tokens)
    loss_sum = torch.zeros((), device=device)
    for inputs, targets in moved:
        loss = model(inputs, targets) / count
        loss.backward()
        loss_sum += loss.detach()
    return loss_sum


def grad_norm_of(
    model: nn.Module, max_norm: float, unscaling: torch.optim.Optimizer | None = None
) -> torch.Tensor:
    """The global gradient norm, left on the device, with the gradients clipped to
    max_norm (inf: measured, never clipped). Given `unscaling`, an optimizer whose step
    divides each gradient by its `grad_scale` (fused AdamW, as AMP's scaler uses it), the
    clip is that divisor: one pass over every gradient fewer (about 5 ms a step for 2B
    parameters on an H100); else torch's clip multiplies the gradients in place."""
    params = [p for p in model.parameters() if p.grad is not None]
    norm = torch.nn.utils.get_total_norm([p.grad for p in params], foreach=True)
    full = norm.full_tensor() if isinstance(norm, DTensor) else norm  # FSDP2: sharded grads
    if math.isinf(max_norm):
        return full
    if unscaling is not None:
        # grad / max(1, norm / max_norm) is torch's clip (its 1e-6 too), taken in the step.
        unscaling.grad_scale = torch.clamp((full + 1e-6) / max_norm, min=1.0)  # type: ignore[attr-defined]
    else:
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, norm, foreach=True)
    return full


def evaluate(model: nn.Module, batches: list[Batch], device: torch.device) -> float:
    """Mean loss per trained-on target over the held-out batches of all ranks."""
    model.eval()
    total = torch.zeros(2, dtype=torch.float64, device=device)
    with torch.no_grad():
        for inputs, targets in batches:
            targets = targets.to(device)
            total[0] += model(inputs.to(device), targets).double()
            total[1] += targets.ne(IGNORE_INDEX).sum()
    model.train()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return (total[0] / total[1].clamp(min=1)).item()


@dataclass
class Agreed:
    """What all ranks agree on after a step (one small all-reduce)."""

    step: int
    loss: float  # the global mean over trained-on targets
    grad_norm: float
    stop_requested: bool  # any rank got SIGTERM
    writes_in_flight: bool  # any rank still writes an async checkpoint

    @property
    def finite(self) -> bool:
        return math.isfinite(self.loss) and math.isfinite(self.grad_norm)


class Agreement:
    """One step's agreed values, reduced on the device and copied to the host without
    waiting; `resolve()` waits for them (a host sync), which the loop does on the steps
    that need the numbers (log, eval, checkpoint, last) and one step late on the others,
    so the device never drains between steps."""

    def __init__(self, step: int, values: torch.Tensor) -> None:
        self.step = step
        self.event: torch.cuda.Event | None = None
        if values.device.type == "cuda":
            self.host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
            self.host.copy_(values, non_blocking=True)
            self.event = torch.cuda.Event()
            self.event.record()
        else:
            self.host = values

    def resolve(self) -> Agreed:
        if self.event is not None:
            self.event.synchronize()
        loss, stop, in_flight, norm = self.host.tolist()
        return Agreed(self.step, loss, norm, stop > 0, in_flight > 0)


def host_to_device(values: list[float], device: torch.device) -> torch.Tensor:
    """A few host numbers on the device without a host sync (pinned, non-blocking)."""
    host = torch.tensor(values, dtype=torch.float32)
    if device.type != "cuda":
        return host
    return host.pin_memory().to(device, non_blocking=True)


def agree(
    step: int,
    loss_sum: torch.Tensor,
    grad_norm: torch.Tensor,
    stop: StopRequest,
    checkpointer: Checkpointer | None,
) -> tuple[Agreement, torch.Tensor]:
    """Every rank gets the same answers, so all take the same branch afterwards. Also
    returns `found_inf` (1.0 when the loss or the gradient norm is not finite), on the
    device, for an optimizer that can skip the step there (fused AdamW)."""
    pending_done = checkpointer is None or checkpointer.pending_done()
    device = loss_sum.device
    flags = host_to_device([float(stop.requested), float(not pending_done)], device)
    agreed = torch.cat([loss_sum.float().reshape(1), flags])
    dist.all_reduce(agreed, op=dist.ReduceOp.SUM)
    values = torch.cat([agreed, grad_norm.detach().float().reshape(1).to(device)])
    found_inf = (~torch.isfinite(values[0]) | ~torch.isfinite(values[3])).float()
    return Agreement(step, values), found_inf


# --- the loop, with its hooks ---------------------------------------------------------


@dataclass
class Progress:
    """The loop's clock and losses, for the step lines and the summary."""

    first_step: int
    start: float
    now: float = 0.0
    interval_start: float = 0.0
    timed_start: float = 0.0  # after the first step, which pays for warm-up
    interval_tokens: int = 0
    first_loss: float = math.nan
    last_loss: float = math.nan
    last_eval: float = math.nan
    stopped_by: int | None = None


class TrainLoop:
    def __init__(
        self,
        cfg: TrainConfig,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        scheduler: Any,
        data: Data,
        checkpointer: Checkpointer | None,
        device: torch.device,
        emit: Emit,
        stop: StopRequest,
        fp8: float8.Float8 | None = None,
    ) -> None:
        self.cfg, self.model, self.optimizer, self.scheduler = cfg, model, optimizer, scheduler
        self.data, self.checkpointer, self.device = data, checkpointer, device
        self.emit, self.stop = emit, stop
        self.world_size = dist.get_world_size()
        self.accum = cfg.optim.grad_accum_steps
        self.tokens_per_step = (
            cfg.train_batch_size * self.world_size * self.accum * cfg.data.seq_len
        )
        self.max_norm = cfg.optim.max_grad_norm or math.inf  # inf: measure, never clip
        self.validation_freq = cfg.metrics.validation_freq if data.held_out else 0
        m = cfg.model
        self.params = num_params(model)
        self.flops_per_token = perf.flops_per_token(
            perf.matmul_params(self.params, m.vocab_size, m.dim, m.tie_word_embeddings),
            m.n_layers,
            m.attention_dim,
            cfg.data.seq_len,
        )
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else None
        self.peak_flops = perf.peak_flops(name)
        self.peak_fp8_flops = perf.peak_fp8_flops(name)
        self.float8 = fp8  # what --float8 converted (None: off)
        self.lr = math.nan  # of the last step, for its log line
        self.skip_on_device = bool(optimizer.defaults.get("fused"))
        self.rank_times: RankTimes | None = None  # several ranks: who holds the others back
        self.gpu: gpu_telemetry.Sampler | None = None  # this rank's GPU through NVML (CUDA)

    def emit_start(self, backend: str, step: int) -> None:
        cfg = self.cfg
        # Where a hang's NCCL dumps will be: a watchdog abort leaves no error line.
        dumps = flight_recorder_dumps(os.environ)
        self.emit(
            "start",
            world_size=self.world_size,
            device=self.device.type,
            backend=backend,
            model_type=cfg.model_type,
            params=self.params,
            max_steps=cfg.max_steps,
            seq_len=cfg.data.seq_len,
            train_batch_size=cfg.train_batch_size,
            grad_accum_steps=self.accum,
            global_batch_size=cfg.train_batch_size * self.world_size * self.accum,
            tokens_per_step=self.tokens_per_step,
            resumed_from=step or None,
            # A monitor's expectations: a step line every log_freq steps, and a save
            # (no line while it runs) every checkpoint_freq (0: at the end only).
            log_freq=cfg.metrics.log_freq,
            checkpoint_freq=None if self.checkpointer is None else cfg.checkpoint.checkpoint_freq,
            # A collective that waits this long after the first step fails the job.
            collective_timeout_s=TRAIN_TIMEOUT.total_seconds(),
            **({"nccl_flight_recorder": dumps} if dumps else {}),
            **self.float8_fields(),
        )

    def float8_fields(self) -> dict[str, Any]:
        """The start line's float8 facts: linears converted, weights gathered in fp8."""
        if self.float8 is None:
            return {}
        return {
            "float8_linears": len(self.float8.converted),
            "float8_all_gather": self.float8.fp8_all_gather,
        }

    def run(self, step: int, resumed_from: Path | None) -> dict[str, Any]:
        start = time.perf_counter()
        p = Progress(first_step=step + 1, start=start, now=start, interval_start=start)
        p.timed_start = start
        self.gpu = gpu_telemetry.for_device(self.device)
        if self.world_size > 1:
            cuda = self.device.type == "cuda"  # every rank adds the GPU's floats, or none does
            extra = partial(gpu_telemetry.window_of, self.gpu) if cuda else None
            self.rank_times = RankTimes(self.device, step, extra)
        late: Agreement | None = None  # a step's values, read one step later
        while step < self.cfg.max_steps:
            step += 1
            current = self.step(step)
            earlier = self.check(late.resolve()) if late is not None else None
            late, agreed = None, earlier
            if self.needs_values(step, p) or (earlier is not None and earlier.stop_requested):
                agreed = self.check(current.resolve())
            else:
                late = current
            if step == p.first_step:
                # Compile, the first all-gathers and HF reads are behind us: a collective
                # that waits longer than this now is a hang (the flight recorder dumps).
                shorten_timeout(training_groups(self.model))
            self.after_step(step, agreed, p)
            self.finalize_checkpoint(agreed)
            if self.on_checkpoint(step, agreed, p):
                break
        if self.checkpointer is not None:
            self.checkpointer.close()
        if self.rank_times is not None:
            self.rank_times.close()
        if self.gpu is not None:
            self.gpu.close()
        return self.summary(step, p, resumed_from)

    def needs_values(self, step: int, p: Progress) -> bool:
        """Steps whose loss, norm or flags are read at once (a host sync): the first, log
        and eval steps, checkpoint steps (no checkpoint of a non-finite state) and the
        last. The others are read one step later."""
        cfg = self.cfg
        freq = self.cfg.checkpoint.checkpoint_freq
        return (
            step == p.first_step
            or step == cfg.max_steps
            or step % cfg.metrics.log_freq == 0
            or bool(self.validation_freq and step % self.validation_freq == 0)
            or bool(self.checkpointer is not None and freq and step % freq == 0)
        )

    def step(self, step: int) -> Agreement:
        """One optimizer step, nothing read back from the device. With fused AdamW a
        non-finite loss or norm skips the update on the device (found_inf)."""
        tokens = self.tokens_per_step
        loss_sum = train_step(self.model, self.data.batches, self.accum, self.device, tokens)
        unscaling = self.optimizer if self.skip_on_device else None  # fused AdamW
        grad_norm = grad_norm_of(self.model, self.max_norm, unscaling)
        agreement, found_inf = agree(step, loss_sum, grad_norm, self.stop, self.checkpointer)
        if self.skip_on_device:
            self.optimizer.found_inf = found_inf  # type: ignore[attr-defined]
        self.lr = self.scheduler.get_last_lr()[0]  # the LR this step is taken with
        if self.checkpointer is not None:
            self.checkpointer.wait_staged()  # an async save's copy of the weights is done
        self.optimizer.step()
        if self.float8 is not None:
            self.float8.after_optimizer_step(self.model)
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        return agreement

    def check(self, agreed: Agreed) -> Agreed:
        """Raise NonFiniteLossError for a step whose loss or gradient norm is NaN/inf.
        Checkpoint steps are checked before they save, so no checkpoint of such a state
        is ever written."""
        if not agreed.finite:
            if self.checkpointer is not None:
                self.checkpointer.close()
            raise NonFiniteLossError(
                f"non-finite loss {agreed.loss} / grad_norm {agreed.grad_norm} at step "
                f"{agreed.step}; lower --learning_rate"
            )
        return agreed

    def finalize_checkpoint(self, agreed: Agreed | None) -> None:
        """Mark an async checkpoint complete once every rank said its write is done, in
        values agreed after that save began."""
        ckpt = self.checkpointer
        if ckpt is None or ckpt.pending is None or agreed is None:
            return
        if agreed.step > ckpt.pending.step and not agreed.writes_in_flight:
            ckpt.finalize(wait=False)

    def after_step(self, step: int, agreed: Agreed | None, p: Progress) -> None:
        p.now = time.perf_counter()
        p.interval_tokens += self.tokens_per_step
        if agreed is not None and agreed.step == step:
            if step == p.first_step:
                p.first_loss, p.timed_start = agreed.loss, p.now
            p.last_loss = agreed.loss
            self.on_log(step, agreed, p)
        self.on_evaluate(step, p)

    def on_log(self, step: int, agreed: Agreed, p: Progress) -> None:
        log_freq, last = self.cfg.metrics.log_freq, self.cfg.max_steps
        if not (step == p.first_step or step % log_freq == 0 or step == last):
            return
        interval = max(p.now - p.interval_start, 1e-9)
        tokens_per_s = p.interval_tokens / interval
        per_device = tokens_per_s / self.world_size
        # Collective (every rank logs the same steps): one all_gather of a float.
        ranks = self.rank_times.window(step) if self.rank_times is not None else {}
        gpus = gpu_telemetry.step_fields(
            self.rank_times.extra_rows if self.rank_times is not None
            else [self.gpu.window()] if self.gpu is not None else []
        )  # fmt: skip
        self.emit(
            "step",
            step=step,
            loss=round(agreed.loss, 5),
            lr=self.lr,
            grad_norm=round(agreed.grad_norm, 5),
            tokens_per_s=round(tokens_per_s, 1),
            tokens_per_s_per_device=round(per_device, 1),
            mfu=_round(perf.mfu(per_device, self.flops_per_token, self.peak_flops), 4),
            **self.fp8_peak_mfu(per_device),
            tokens=step * self.tokens_per_step,
            elapsed_s=round(p.now - p.start, 3),
            step_s=round(interval * self.tokens_per_step / max(p.interval_tokens, 1), 4),
            time=round(time.time(), 3),  # wall clock: a monitor tells a hang by its age
            **ranks,
            **gpus,
            **memory_stats(self.device.type),
        )
        p.interval_start, p.interval_tokens = p.now, 0

    def fp8_peak_mfu(self, per_device: float) -> dict[str, float | None]:
        """With --float8, MFU against the GPU's dense fp8 peak too (`mfu` stays bf16's)."""
        if self.float8 is None:
            return {}
        mfu = perf.mfu(per_device, self.flops_per_token, self.peak_fp8_flops)
        return {"mfu_fp8_peak": _round(mfu, 4)}

    def on_evaluate(self, step: int, p: Progress) -> None:
        freq = self.validation_freq
        if not freq or not (step % freq == 0 or step == self.cfg.max_steps):
            return
        p.last_eval = evaluate(self.model, self.data.held_out, self.device)
        self.emit(
            "eval",
            step=step,
            loss=round(p.last_eval, 5),
            perplexity=round(math.exp(min(p.last_eval, 50.0)), 3),
        )

    def on_checkpoint(self, step: int, agreed: Agreed | None, p: Progress) -> bool:
        """Save when due; True when the loop must stop (SIGTERM: saved, then stop).
        `agreed` is this step's values on every step that saves (needs_values)."""
        ckpt = self.checkpointer
        stopping = agreed is not None and agreed.stop_requested
        if ckpt is not None:
            freq = self.cfg.checkpoint.checkpoint_freq
            final = stopping or step == self.cfg.max_steps
            if final or (freq and step % freq == 0):
                # Synchronous when the process is about to exit: nothing may be in
                # flight when it does.
                state = train_state(
                    self.model, self.optimizer, self.scheduler, self.data.batches, step
                )
                ckpt.save(step, state, force_sync=final)
        if stopping:
            p.stopped_by = self.stop.signal or signal.SIGTERM
            saved = ckpt.last_saved if ckpt is not None else None
            self.emit("preempted", step=step, signal=int(p.stopped_by), checkpoint=saved)
        return stopping

    def summary(self, step: int, p: Progress, resumed_from: Path | None) -> dict[str, Any]:
        elapsed = time.perf_counter() - p.start
        steps_run = step - p.first_step + 1
        if steps_run > 1:
            throughput = (steps_run - 1) * self.tokens_per_step / max(p.now - p.timed_start, 1e-9)
        elif steps_run == 1:
            throughput = self.tokens_per_step / max(elapsed, 1e-9)
        else:  # resumed a checkpoint already at max_steps: nothing left to do
            throughput = math.nan
        summary = {
            "model": self.cfg.model_name_or_path or self.cfg.model_type,
            "params": self.params,
            "steps": step,
            "first_loss": round(p.first_loss, 5),
            "last_loss": round(p.last_loss, 5),
            "tokens_per_s": _round(throughput, 1),
            "elapsed_s": round(elapsed, 3),
            "world_size": self.world_size,
            "resumed_from": p.first_step - 1 or None,
            "last_eval_loss": _round(p.last_eval, 5),
            "checkpoint": _last_checkpoint(self.checkpointer, resumed_from),
        }
        self.emit("summary", **summary)
        summary["preempted"] = p.stopped_by is not None
        return summary


def _last_checkpoint(checkpointer: Checkpointer | None, resumed: Path | None) -> str | None:
    if checkpointer is None:
        return None
    return checkpointer.last_saved or (str(resumed) if resumed else None)


def _round(value: float | None, digits: int) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(value, digits)


# --- the entry point --------------------------------------------------------------------


def error_fields(exc: BaseException) -> dict[str, Any]:
    """The error event's fields. `retryable` false tells a supervisor to stop restarting:
    the same configuration fails the same way again."""
    # DCP's own str is a traceback per rank; its failures say what happened.
    text = failure_summary(exc) if isinstance(exc, CheckpointException) else str(exc)
    return {
        "error_type": type(exc).__name__,
        "message": first_line(text, MESSAGE_LIMIT),
        "retryable": not isinstance(exc, ConfigError),
    }


def flight_recorder_dumps(environ: Any) -> str | None:
    """Where NCCL's flight recorder dumps on a timeout (one file per rank: the prefix
    and the rank), when this run has it on (trainer.device.flight_recorder_env)."""
    if environ.get("TORCH_NCCL_DUMP_ON_TIMEOUT") != "1":
        return None
    prefix = environ.get("TORCH_FR_DUMP_TEMP_FILE") or environ.get(
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE"
    )
    return f"{prefix}<rank>" if prefix else None


def record_error(exc: BaseException, flight_recorder: str | None) -> None:
    """torchrun's error file (a no-op unless it set TORCHELASTIC_ERROR_FILE): the
    exception, and where the flight recorder dumps, for the doctor to read."""
    get_error_handler().record_exception(exc)
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not flight_recorder or not path or not os.path.isfile(path):
        return
    data = json.loads(Path(path).read_text())
    data["message"]["extraInfo"]["nccl_flight_recorder"] = flight_recorder
    Path(path).write_text(json.dumps(data))


def main(argv: list[str] | None = None) -> int:
    """Run a training job; returns the process exit code.

    Expected failures (bad config, divergence) become an error line and an exit code,
    and are written to torchrun's error file so its failure report names the cause.
    The line's message is one bounded line; `retryable` is false for a ConfigError.
    Anything else also gets an error line, then is re-raised so `record` (on the entry
    point in __main__.py) writes it to the error file and the traceback reaches
    stderr. SIGTERM -> checkpoint -> EXIT_PREEMPTED.
    """
    env = DistEnv.from_environ()
    metrics = MetricsEmitter(env.rank)
    # Kubeflow Trainer v2's status server, where its controller named one (rank 0 posts).
    progress = progress_status.from_environ(os.environ, env.rank)
    emit = progress.observe(metrics.emit) if progress is not None else metrics.emit
    stop = StopRequest()

    def report(exc: BaseException, *, reraised: bool = False) -> None:
        fields = error_fields(exc)
        if not reraised and exc.__cause__ is not None:
            # A handled error that wraps another: the one-line message leaves out the
            # cause's detail, which belongs in the log (a re-raised one prints its own).
            traceback.print_exception(exc, file=sys.stderr)
        dumps = flight_recorder_dumps(os.environ)
        if dumps:
            fields["nccl_flight_recorder"] = dumps
        if env.rank == 0:
            metrics.emit("error", **fields)
            if tracker is not None:  # the tracked run ends FAILED
                tracker.on_event("error", fields)
        else:  # stdout belongs to rank 0; other ranks still say what went wrong
            print(format_line("error", rank=env.rank, **fields), file=sys.stderr, flush=True)
        record_error(exc, dumps)

    tracker: tracking.Tracking | None = None
    stop.install()
    try:
        cfg = load_config(argv)
        # TensorBoard / MLflow (rank 0; never stops training: trainer/tracking.py).
        tracker = tracking.from_environ(os.environ, env.rank, cfg.to_dict())
        summary = train(cfg, env, tracker.observe(emit) if tracker else emit, stop)
    except ConfigError as exc:
        report(exc)
        return EXIT_CONFIG
    except NonFiniteLossError as exc:
        report(exc)
        return EXIT_FAILURE
    except (Exception, CheckpointException) as exc:  # DCP's is a BaseException
        report(exc, reraised=True)
        raise
    finally:
        stop.uninstall()
        if tracker is not None:
            tracker.close()  # what is queued goes out (bounded wait)
        if progress is not None:
            progress.close()  # the final post goes out (bounded wait)
    return EXIT_PREEMPTED if summary["preempted"] else 0
