"""The training loop, top to bottom.

    setup (process group, threads) -> data -> model (preset or HF weights) -> FSDP2
    -> AdamW + LR schedule -> resume from the newest complete checkpoint
    -> loop: micro-batches (forward, loss, backward), clip, agree, step, log,
             evaluate, checkpoint, stop on SIGTERM -> summary -> teardown

`main()` is the one place where exceptions become a JSON error line and an exit code.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.elastic.multiprocessing.errors import get_error_handler
from torch.distributed.tensor import DTensor

from trainer import device as devices
from trainer import hf
from trainer import metrics as perf
from trainer.checkpoint import (
    Checkpointer,
    failure_summary,
    first_line,
    rng_state,
    set_rng_state,
)
from trainer.checkpoint_layout import CONFIG_FILE
from trainer.config import ConfigError, TrainConfig
from trainer.config_loader import load_config
from trainer.data import (
    PackedBatches,
    eval_batches,
    load_documents,
    split_tokens,
    tokenize_documents,
)
from trainer.metrics import MetricsEmitter, format_line, memory_mb
from trainer.model import Transformer, num_params
from trainer.parallel import (
    apply_activation_checkpointing,
    apply_compile,
    apply_fsdp,
    build_mesh,
    reshard_after_forward,
)
from trainer.tokenizer import load_tokenizer

EXIT_CONFIG = 2
EXIT_FAILURE = 1
# SIGTERM handled: a checkpoint was saved. 128 + SIGTERM, the code Kubernetes and the
# Kubeflow ExitCode restart policy treat as retryable; distinct from the -15 of a
# process that was killed by the signal without saving.
EXIT_PREEMPTED = 143
# The error line's message: one line this long at most; the traceback goes to stderr.
MESSAGE_LIMIT = 300
PROCESS_GROUP_TIMEOUT = timedelta(minutes=10)


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
    # device_id lets NCCL connect eagerly.
    device_id = device if device.type == "cuda" else None
    if not env.launched:
        # `python -m trainer`: a world of one. An in-memory store needs no port, so the
        # same FSDP code path runs with nothing to rendezvous with.
        dist.init_process_group(backend=backend, store=dist.HashStore(), rank=0, world_size=1)
    elif os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        # Under torchrun. Its store outlives a restart (--max-restarts) and still holds
        # the dead attempt's gloo addresses, which the new workers would try to
        # connect to; a key prefix per attempt keeps each attempt to itself.
        store = dist.TCPStore(
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
            env.world_size,
            is_master=False,
            timeout=PROCESS_GROUP_TIMEOUT,
        )
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        dist.init_process_group(
            backend=backend,
            store=dist.PrefixStore(f"/trainer/attempt_{attempt}", store),
            rank=env.rank,
            world_size=env.world_size,
            timeout=PROCESS_GROUP_TIMEOUT,
            device_id=device_id,
        )
    else:  # another env:// launcher (MASTER_ADDR/PORT, RANK, WORLD_SIZE)
        dist.init_process_group(backend=backend, device_id=device_id)


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


class StopRequest:
    """Set by SIGTERM (Kubernetes eviction, spot reclaim, torchrun shutting down).
    The loop finishes its step, saves a checkpoint and exits with EXIT_PREEMPTED."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self._previous: Any = None

    def install(self) -> None:
        self._previous = signal.signal(signal.SIGTERM, self._handle)

    def uninstall(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)

    def _handle(self, signum: int, frame: Any) -> None:
        self.signal = signum

    @property
    def requested(self) -> bool:
        return self.signal is not None


def train_state(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    batches: PackedBatches,
    step: int,
) -> dict[str, Any]:
    """Everything a resumed run needs to continue exactly where this one is.

    Sharded model/optimizer tensors keep their DTensor layout, so each rank saves
    only its shard and DCP can reshard on load to another world size.
    """
    return {
        "model": get_model_state_dict(model),
        "optim": get_optimizer_state_dict(model, optimizer),
        "train": {
            "step": step,
            "scheduler": scheduler.state_dict(),
            "data": batches.state_dict(),
            "rng": rng_state(),
        },
    }


def restore_train_state(
    state: dict[str, Any], model: nn.Module, optimizer: Any, scheduler: Any, batches: PackedBatches
) -> int:
    set_model_state_dict(model, state["model"])
    set_optimizer_state_dict(model, optimizer, state["optim"])
    scheduler.load_state_dict(state["train"]["scheduler"])
    batches.load_state_dict(state["train"]["data"])
    set_rng_state(state["train"]["rng"])
    return int(state["train"]["step"])


def check_same_model(path: Path, cfg: TrainConfig) -> None:
    """A checkpoint of another model shape cannot be resumed; say so plainly instead
    of failing deep inside DCP with a shape mismatch."""
    saved = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))["model"]
    ours = dataclasses.asdict(cfg.model)
    changed = sorted(k for k in ours if saved.get(k) != ours[k])
    if changed:
        diffs = ", ".join(f"{k} {saved.get(k)!r} -> {ours[k]!r}" for k in changed[:4])
        raise ConfigError(
            f"checkpoint {path} holds a different model ({diffs}); use a new "
            "--checkpoint_dir (or a new job name) to start over"
        )


def evaluate(
    model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]], device: torch.device
) -> float:
    """Mean loss over the held-out batches of all ranks (same count on every rank)."""
    model.eval()
    total = torch.zeros(2, dtype=torch.float64)
    with torch.no_grad():
        for inputs, targets in batches:
            logits = model(inputs.to(device))
            loss = F.cross_entropy(logits.float().flatten(0, 1), targets.to(device).flatten())
            total += torch.tensor([loss.item(), 1.0], dtype=torch.float64)
    model.train()
    total = total.to(device)
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return (total[0] / total[1]).item()


def grad_norm_of(model: nn.Module, max_norm: float) -> float:
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if isinstance(norm, DTensor):  # FSDP2 grads are sharded DTensors
        norm = norm.full_tensor()
    return float(norm)


def train(
    cfg: TrainConfig, env: DistEnv, emit: Callable[..., None], stop: StopRequest | None = None
) -> dict[str, Any]:
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
    emit: Callable[..., None],
    device: torch.device,
    backend: str,
    stop: StopRequest,
) -> dict[str, Any]:
    world_size = dist.get_world_size()
    rank = dist.get_rank()
    bf16_ok = device.type == "cuda" and torch.cuda.is_bf16_supported()
    if cfg.parallel.cpu_offload and device.type != "cuda":
        raise ConfigError("cpu_offload moves GPU memory to the host; this run has no GPU")

    # --- data: every rank tokenizes the dataset and takes its own windows ----------
    tokenizer = load_tokenizer(cfg.data.tokenizer)
    if cfg.model.vocab_size < tokenizer.n_vocab:
        raise ConfigError(
            f"model vocab_size {cfg.model.vocab_size} < tokenizer vocab {tokenizer.n_vocab}; "
            f"pick a --model_type or --model_name_or_path whose vocabulary has at least "
            f"{tokenizer.n_vocab} entries, or another --tokenizer"
        )
    tokens = tokenize_documents(
        load_documents(cfg.data.dataset, cfg.data.dataset_config_name), tokenizer
    )
    train_tokens, val_tokens = split_tokens(tokens, cfg.data.validation_split)
    try:
        batches = PackedBatches(
            train_tokens, cfg.data.seq_len, cfg.train_batch_size, rank, world_size, cfg.seed
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    # A small held-out split may not fill a training-sized batch on every rank;
    # evaluate with smaller batches rather than not at all.
    val_windows = max(0, len(val_tokens) - 1) // (cfg.data.seq_len + 1)
    eval_batch = max(1, min(cfg.train_batch_size, val_windows // world_size))
    held_out = eval_batches(
        val_tokens, cfg.data.seq_len, eval_batch, rank, world_size, cfg.metrics.validation_batches
    )
    validation_freq = cfg.metrics.validation_freq if held_out else 0

    # --- checkpoints: find where to resume before building anything big ------------
    checkpointer = None
    resume_from = None
    if cfg.checkpoint.checkpoint_dir:
        staging = Path(cfg.output_dir or tempfile.mkdtemp(prefix="trainer-")) / "checkpoints"
        checkpointer = Checkpointer(
            cfg.checkpoint, rank, emit, cfg.to_dict(), tokenizer.files, staging
        )
        resume_from = checkpointer.find_resumable()
        if resume_from is not None:
            check_same_model(resume_from, cfg)

    # --- model: same seed on every rank -> identical init before sharding -----------
    # Built on CPU in fp32; fully_shard moves each rank's shard to `device`.
    torch.manual_seed(cfg.seed)
    model = Transformer(cfg.model, rope_len=cfg.data.seq_len)
    if cfg.model_name_or_path and resume_from is None:
        hf.load_hf_weights(model, cfg.model_name_or_path)
    apply_activation_checkpointing(model, cfg.parallel.activation_checkpointing)
    if cfg.parallel.compile:
        apply_compile(model)
    mesh = build_mesh(device.type, cfg.parallel.sharding_strategy, world_size, env.local_world_size)
    apply_fsdp(
        model,
        mesh,
        devices.mixed_precision_policy(device.type, bf16_ok),
        reshard_after_forward(cfg.parallel.sharding_strategy),
        cpu_offload=cfg.parallel.cpu_offload,
    )
    model.train()

    optimizer = build_optimizer(model, cfg)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        partial(lr_factor, warmup_steps=cfg.optim.warmup_steps, max_steps=cfg.max_steps),
    )
    max_norm = cfg.optim.max_grad_norm or math.inf  # inf: measure the norm, never clip

    step = 0
    if checkpointer is not None and resume_from is not None:
        state = train_state(model, optimizer, scheduler, batches, step)
        checkpointer.load(resume_from, state)
        try:
            step = restore_train_state(state, model, optimizer, scheduler, batches)
        except ValueError as exc:  # the dataset, tokenizer, seq_len or seed changed
            raise ConfigError(
                f"cannot resume from {resume_from}: {exc}; use a new --checkpoint_dir "
                "(or a new job name) to start over"
            ) from exc

    if cfg.output_dir and rank == 0:
        out = Path(cfg.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")

    accum = cfg.optim.grad_accum_steps
    global_batch = cfg.train_batch_size * world_size * accum
    tokens_per_step = global_batch * cfg.data.seq_len
    params = num_params(model)
    flops_per_token = perf.flops_per_token(
        params,
        cfg.model.vocab_size * cfg.model.dim,
        cfg.model.n_layers,
        cfg.model.dim,
        cfg.data.seq_len,
    )
    peak = perf.peak_flops(torch.cuda.get_device_name(device) if device.type == "cuda" else None)
    emit(
        "start",
        world_size=world_size,
        device=device.type,
        backend=backend,
        model_type=cfg.model_type,
        params=params,
        max_steps=cfg.max_steps,
        seq_len=cfg.data.seq_len,
        train_batch_size=cfg.train_batch_size,
        grad_accum_steps=accum,
        global_batch_size=global_batch,
        tokens_per_step=tokens_per_step,
        resumed_from=step or None,
    )

    # --- the loop -----------------------------------------------------------------
    first_step = step + 1
    start = time.perf_counter()
    now = interval_start = timed_start = start
    interval_tokens = 0
    first_loss = last_loss = last_eval = math.nan
    stopped_by: int | None = None
    while step < cfg.max_steps:
        step += 1
        loss_sum = torch.zeros((), device=device)
        for _ in range(accum):
            inputs, targets = next(batches)
            logits = model(inputs.to(device, non_blocking=True))
            # Loss in fp32 even when the model computes in bf16; / accum so the
            # accumulated gradient is that of the mean over all micro-batches.
            loss = (
                F.cross_entropy(
                    logits.float().flatten(0, 1), targets.to(device, non_blocking=True).flatten()
                )
                / accum
            )
            loss.backward()
            loss_sum += loss.detach()
        grad_norm = grad_norm_of(model, max_norm)

        # One small all-reduce per step: the mean loss, whether any rank was asked
        # to stop, and how many ranks still write an async checkpoint. Every rank
        # gets the same answers, so all take the same branch below.
        agreed = torch.stack(
            [
                loss_sum.float(),
                torch.tensor(float(stop.requested), device=device),
                torch.tensor(float(not _pending_done(checkpointer)), device=device),
            ]
        )
        dist.all_reduce(agreed, op=dist.ReduceOp.SUM)
        step_loss = agreed[0].item() / world_size
        stop_requested, writes_in_flight = agreed[1].item() > 0, agreed[2].item() > 0
        if not (math.isfinite(step_loss) and math.isfinite(grad_norm)):
            # Raised before optimizer.step: the weights stay those of the last good
            # step, and no checkpoint of this state is ever written.
            if checkpointer is not None:
                checkpointer.close()
            raise NonFiniteLossError(
                f"non-finite loss {step_loss} / grad_norm {grad_norm} at step {step}; "
                "lower --learning_rate"
            )

        lr = scheduler.get_last_lr()[0]  # the LR this step is taken with
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        scheduler.step()
        if checkpointer is not None and checkpointer.pending and not writes_in_flight:
            checkpointer.finalize(wait=False)

        now = time.perf_counter()
        interval_tokens += tokens_per_step
        if step == first_step:
            first_loss, timed_start = step_loss, now  # the first step pays for warm-up
        last_loss = step_loss
        if step == first_step or step % cfg.metrics.log_freq == 0 or step == cfg.max_steps:
            tokens_per_s = interval_tokens / max(now - interval_start, 1e-9)
            per_device = tokens_per_s / world_size
            emit(
                "step",
                step=step,
                loss=round(step_loss, 5),
                lr=lr,
                grad_norm=round(grad_norm, 5),
                tokens_per_s=round(tokens_per_s, 1),
                tokens_per_s_per_device=round(per_device, 1),
                mfu=_round(perf.mfu(per_device, flops_per_token, peak), 4),
                tokens=step * tokens_per_step,
                elapsed_s=round(now - start, 3),
                mem_mb=round(memory_mb(device.type), 1),
            )
            interval_start, interval_tokens = now, 0

        if validation_freq and (step % validation_freq == 0 or step == cfg.max_steps):
            last_eval = evaluate(model, held_out, device)
            emit(
                "eval",
                step=step,
                loss=round(last_eval, 5),
                perplexity=round(math.exp(min(last_eval, 50.0)), 3),
            )

        if checkpointer is not None:
            freq = cfg.checkpoint.checkpoint_freq
            if stop_requested or step == cfg.max_steps or (freq and step % freq == 0):
                # Synchronous when the process is about to exit: nothing may be in
                # flight when it does.
                final = stop_requested or step == cfg.max_steps
                state = train_state(model, optimizer, scheduler, batches, step)
                checkpointer.save(step, state, force_sync=final)
            if stop_requested:
                stopped_by = stop.signal or signal.SIGTERM
                emit(
                    "preempted",
                    step=step,
                    signal=int(stopped_by),
                    checkpoint=checkpointer.last_saved,
                )
                break
        elif stop_requested:
            stopped_by = stop.signal or signal.SIGTERM
            emit("preempted", step=step, signal=int(stopped_by), checkpoint=None)
            break
    if checkpointer is not None:
        checkpointer.close()

    # --- summary ------------------------------------------------------------------
    elapsed = time.perf_counter() - start
    steps_run = step - first_step + 1
    if steps_run > 1:
        throughput = (steps_run - 1) * tokens_per_step / max(now - timed_start, 1e-9)
    elif steps_run == 1:
        throughput = tokens_per_step / max(elapsed, 1e-9)
    else:  # resumed a checkpoint already at max_steps: nothing left to do
        throughput = math.nan
    summary = {
        "steps": step,
        "first_loss": round(first_loss, 5),
        "last_loss": round(last_loss, 5),
        "tokens_per_s": _round(throughput, 1),
        "elapsed_s": round(elapsed, 3),
        "world_size": world_size,
        "resumed_from": first_step - 1 or None,
        "last_eval_loss": _round(last_eval, 5),
        "checkpoint": _last_checkpoint(checkpointer, resume_from),
    }
    emit("summary", **summary)
    summary["preempted"] = stopped_by is not None
    return summary


def _last_checkpoint(checkpointer: Checkpointer | None, resumed: Path | None) -> str | None:
    if checkpointer is None:
        return None
    return checkpointer.last_saved or (str(resumed) if resumed else None)


def _pending_done(checkpointer: Checkpointer | None) -> bool:
    return checkpointer is None or checkpointer.pending_done()


def _round(value: float | None, digits: int) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return round(value, digits)


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
    stop = StopRequest()

    def report(exc: BaseException, *, reraised: bool = False) -> None:
        fields = error_fields(exc)
        if not reraised and exc.__cause__ is not None:
            # A handled error that wraps another: the one-line message leaves out the
            # cause's detail, which belongs in the log (a re-raised one prints its own).
            traceback.print_exception(exc, file=sys.stderr)
        if env.rank == 0:
            metrics.emit("error", **fields)
        else:  # stdout belongs to rank 0; other ranks still say what went wrong
            print(format_line("error", rank=env.rank, **fields), file=sys.stderr, flush=True)
        # A no-op unless torchrun set TORCHELASTIC_ERROR_FILE.
        get_error_handler().record_exception(exc)

    stop.install()
    try:
        summary = train(load_config(argv), env, metrics.emit, stop)
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
    return EXIT_PREEMPTED if summary["preempted"] else 0
