"""The training loss: cross-entropy summed over the valid targets, divided by the count
of valid targets of the whole optimizer step (all micro-batches, all ranks).

Why a global count: a mean per rank and per micro-batch weighs a token by how many
other valid tokens share its micro-batch. With --train_on assistant those counts
differ, so 1 rank x 8 and 2 ranks x 4 over the same windows gave different gradients
(a rank with no assistant tokens gave half the gradient). Dividing every micro-batch's
summed loss by one global count makes each token weigh 1/N everywhere; FSDP must then
SUM gradients over ranks instead of averaging them (parallel.sum_gradients).

The head's loss never materialises the full fp32 logits: `ChunkedLinearCrossEntropy`
computes logits, loss and both gradients chunk by chunk during forward (one chunk of
fp32 logits alive at a time) and hands the saved gradients to backward.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from trainer.data import IGNORE_INDEX

# fp32 logits per chunk: 2**28 elements is 1 GiB (about 2k tokens of a 128k vocabulary);
# a small vocabulary gets the whole micro-batch in one chunk.
CHUNK_ELEMENTS = 2**28


def chunk_tokens(vocab_size: int, budget: int = CHUNK_ELEMENTS) -> int:
    """Tokens per chunk so that one chunk's fp32 logits stay within `budget` elements."""
    return max(1, budget // max(1, vocab_size))


def token_loss(logits: torch.Tensor, targets: torch.Tensor, masked: bool) -> torch.Tensor:
    """Mean cross-entropy over the targets of full logits, in fp32 even when the model
    computes in bf16. `masked` (--train_on assistant): targets equal to IGNORE_INDEX add
    nothing, and a batch without any trained-on target gives 0, not NaN."""
    flat_logits, flat_targets = logits.float().flatten(0, 1), targets.flatten()
    if not masked:
        return F.cross_entropy(flat_logits, flat_targets)
    total = F.cross_entropy(flat_logits, flat_targets, ignore_index=IGNORE_INDEX, reduction="sum")
    return total / flat_targets.ne(IGNORE_INDEX).sum().clamp(min=1)


def valid_count(targets: list[torch.Tensor]) -> torch.Tensor:
    """This rank's count of trained-on targets over its micro-batches (on their device)."""
    return torch.stack([t.ne(IGNORE_INDEX).sum() for t in targets]).sum()


def global_valid_count(
    targets: list[torch.Tensor], masked: bool, tokens_per_step: int
) -> torch.Tensor | int:
    """The divisor of every micro-batch's summed loss: trained-on targets of the whole
    step over all ranks. Unmasked, that is every target: a constant, no collective.
    Masked, one all-reduce of one number on the device (no host sync); at least 1, so a
    step with no trained-on token anywhere gives 0, not NaN."""
    if not masked:
        return tokens_per_step
    count = valid_count(targets).to(torch.float32)
    dist.all_reduce(count, op=dist.ReduceOp.SUM)
    return count.clamp(min=1.0)


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    """sum over valid targets of cross_entropy(hidden @ weight.T, target), with the
    gradients for hidden and weight computed chunk by chunk in forward.

    Memory: one chunk of fp32 logits at a time, turned into their softmax and gradient
    in place (a bf16 model adds the chunk's bf16 copy: 1.5x), plus the gradients (the
    size of hidden, and of weight in fp32) kept for backward, instead of the full fp32
    logits, their softmax and their gradient. Compute: the same three matmuls as eager
    (logits, grad of hidden, grad of weight); nothing is recomputed.
    """

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        chunk: int,
        with_grads: bool,
    ) -> torch.Tensor:
        need_grad = with_grads and (ctx.needs_input_grad[0] or ctx.needs_input_grad[1])
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        grad_hidden = torch.empty_like(hidden) if need_grad else None
        # The weight's gradient summed over chunks in fp32, cast to the weight's dtype
        # once in backward: summed in bf16, each chunk's addition rounded the running sum
        # again (4-10x the error of one rounding).
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if need_grad else None
        for start in range(0, hidden.shape[0], chunk):
            h = hidden[start : start + chunk]
            t = targets[start : start + chunk]
            valid = t.ne(IGNORE_INDEX)
            safe = torch.where(valid, t, 0)
            # One chunk-sized fp32 tensor: the logits become their softmax in place.
            probs = (h @ weight.t()).float()
            picked = probs.gather(1, safe.unsqueeze(1)).squeeze(1)
            peak = probs.amax(dim=1, keepdim=True)
            sums = probs.sub_(peak).exp_().sum(dim=1, keepdim=True)
            lse = (sums.log() + peak).squeeze(1)
            total += torch.where(valid, lse - picked, 0.0).sum()
            if grad_hidden is not None and grad_weight is not None:
                # d(sum CE)/d logits = softmax - onehot(target), zero on ignored rows.
                probs.div_(sums)
                probs.scatter_add_(1, safe.unsqueeze(1), torch.full_like(picked, -1.0).unsqueeze(1))
                probs.mul_(valid.unsqueeze(1))
                grad = probs.to(hidden.dtype)  # the same tensor in fp32
                torch.mm(grad, weight, out=grad_hidden[start : start + chunk])
                add_weight_grad(grad_weight, grad, h, chunk * weight.shape[0] // 8)
                del grad
            # Freed before the next chunk's logits exist: holding them over the loop's
            # next matmul made the peak about 4x one chunk.
            del probs
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.weight_dtype = weight.dtype
        return total

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        grad_hidden, grad_weight = ctx.saved_tensors
        return (
            grad_hidden * grad_out.to(grad_hidden.dtype),
            (grad_weight * grad_out.float()).to(ctx.weight_dtype),  # the one rounding
            None,
            None,
            None,
        )


def add_weight_grad(total: torch.Tensor, grad: torch.Tensor, h: torch.Tensor, budget: int) -> None:
    """total (fp32) += grad.T @ h. An fp32 grad goes straight into total; a bf16 one is
    multiplied in bf16 (the tensor cores' dtype, fp32 inside the matmul) a block of
    vocabulary rows at a time, each block's product at most `budget` elements, and
    added in fp32."""
    if grad.dtype == total.dtype:
        total.addmm_(grad.t(), h)
        return
    rows = max(1, budget // max(1, h.shape[1]))
    for first in range(0, total.shape[0], rows):
        total[first : first + rows] += grad[:, first : first + rows].t() @ h


def chunked_cross_entropy_sum(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int | None = None
) -> torch.Tensor:
    """Summed fp32 cross-entropy of the logits `hidden @ weight.T` over the valid targets.
    hidden: (..., dim); targets: (...) with IGNORE_INDEX where nothing is trained on."""
    flat = hidden.reshape(-1, hidden.shape[-1])
    chunk = chunk or chunk_tokens(weight.shape[0])
    # Under no_grad (evaluation) the gradients are not computed: one matmul, not three.
    with_grads = torch.is_grad_enabled()
    return ChunkedLinearCrossEntropy.apply(flat, weight, targets.reshape(-1), chunk, with_grads)
