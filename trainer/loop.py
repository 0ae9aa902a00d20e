"""The training loop and its hooks (log, evaluate, checkpoint, stop), and the run's
summary. `TrainLoop.run` is the loop, top to bottom; each hook is a method below it."""

from __future__ import annotations

import math
import os
import signal
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from trainer import float8, gpu_telemetry
from trainer import metrics as perf
from trainer.checkpoint import Checkpointer
from trainer.config import TrainConfig
from trainer.dataset import Data
from trainer.device import flight_recorder_dumps
from trainer.distributed import TRAIN_TIMEOUT, StopRequest, shorten_timeout
from trainer.metrics import Emit, memory_stats
from trainer.model import num_params
from trainer.parallel import training_groups
from trainer.rank_times import RankTimes
from trainer.step import (
    Agreed,
    Agreement,
    NonFiniteLossError,
    agree,
    evaluate,
    grad_norm_of,
    train_step,
)
from trainer.train_state import train_state

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
            self.rank_times.extra_rows
            if self.rank_times is not None
            else [self.gpu.window()]
            if self.gpu is not None
            else []
        )
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
