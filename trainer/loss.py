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

    Memory: one chunk of fp32 logits (and its softmax) at a time, plus the gradients
    (the size of hidden and of weight) kept for backward, instead of the full fp32
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
        # The weight's gradient in the weight's own dtype, each chunk added by one addmm
        # (fp32 inside the matmul, one rounding per chunk; under FSDP's bf16 compute the
        # gradient is bf16 anyway). An fp32 accumulator took three more passes over a
        # vocab x dim matrix: on an H100 the 128k-vocab head's loss took 37 ms, not 26,
        # over 4096 tokens.
        grad_weight = torch.zeros_like(weight) if need_grad else None
        for start in range(0, hidden.shape[0], chunk):
            h = hidden[start : start + chunk]
            t = targets[start : start + chunk]
            logits = (h @ weight.t()).float()
            valid = t.ne(IGNORE_INDEX)
            safe = torch.where(valid, t, 0)
            lse = torch.logsumexp(logits, dim=-1)
            picked = logits.gather(1, safe.unsqueeze(1)).squeeze(1)
            total += torch.where(valid, lse - picked, 0.0).sum()
            if grad_hidden is None or grad_weight is None:
                continue
            # d(sum CE)/d logits = softmax - onehot(target), zero on ignored rows.
            grad = torch.exp(logits.sub_(lse.unsqueeze(1)))
            grad.scatter_add_(1, safe.unsqueeze(1), torch.full_like(picked, -1.0).unsqueeze(1))
            grad.mul_(valid.unsqueeze(1))
            grad_low = grad.to(hidden.dtype)
            torch.mm(grad_low, weight, out=grad_hidden[start : start + chunk])
            grad_weight.addmm_(grad_low.t(), h)
        ctx.save_for_backward(grad_hidden, grad_weight)
        return total

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        grad_hidden, grad_weight = ctx.saved_tensors
        return (
            grad_hidden * grad_out.to(grad_hidden.dtype),
            grad_weight * grad_out.to(grad_weight.dtype),
            None,
            None,
            None,
        )


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
