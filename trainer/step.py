"""One optimizer step's pieces, nothing read back from the device: forward and
backward over the micro-batches, the gradient norm and clip, the one all-reduce every
rank agrees on (read one step late), and the held-out evaluation."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from trainer.checkpoint import Checkpointer
from trainer.data import IGNORE_INDEX, Batch
from trainer.distributed import StopRequest
from trainer.loss import global_valid_count
from trainer.stream import Batches


class NonFiniteLossError(RuntimeError):
    """Loss or gradient norm became NaN/inf: the run diverged."""


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
