"""The loss path: the model's head returns the summed cross-entropy computed in chunks,
never the full fp32 logits, with the loss and gradients of the plain full-logits path;
attention shares KV heads through SDPA's enable_gqa with the numbers of an explicit
repeat."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from trainer.config import ModelConfig
from trainer.data import IGNORE_INDEX
from trainer.loss import CHUNK_ELEMENTS, chunk_tokens, chunked_cross_entropy_sum, token_loss
from trainer.model import Attention, LMHead, Transformer, rope_cos_sin

CFG = ModelConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=97, max_seq_len=32)


def test_chunks_hold_at_most_a_gib_of_fp32_logits():
    assert chunk_tokens(128_256) == CHUNK_ELEMENTS // 128_256 == 2092
    assert chunk_tokens(512) == 524_288  # a small vocabulary: one chunk per micro-batch
    assert chunk_tokens(10**12) == 1


@pytest.mark.parametrize("chunk", [1, 5, 1000])
@pytest.mark.parametrize("masked", [False, True])
def test_chunked_cross_entropy_matches_the_full_logits(chunk, masked):
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(3, 7, 16, generator=gen, requires_grad=True)
    weight = torch.randn(11, 16, generator=gen, requires_grad=True)
    targets = torch.randint(0, 11, (3, 7), generator=gen)
    if masked:
        targets[0] = IGNORE_INDEX  # a whole row with nothing to train on
        targets[1, :4] = IGNORE_INDEX
    got = chunked_cross_entropy_sum(hidden, weight, targets, chunk)
    (got * 0.25).backward()
    got_grads = hidden.grad.clone(), weight.grad.clone()
    hidden.grad = weight.grad = None
    want = F.cross_entropy((hidden @ weight.t()).flatten(0, 1), targets.flatten(), reduction="sum")
    (want * 0.25).backward()
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-5)
    torch.testing.assert_close(got_grads[0], hidden.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_grads[1], weight.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("chunk", [3, 21])
def test_bf16_gradients_stay_bf16_and_match_the_fp32_logits_to_bf16_precision(chunk):
    """Under FSDP's bf16 compute the head's weight gradient is bf16, added chunk by chunk
    (one rounding per chunk): within bf16's precision of the fp32 full-logits gradient."""
    gen = torch.Generator().manual_seed(2)
    hidden = torch.randn(21, 32, generator=gen).bfloat16().requires_grad_()
    weight = (torch.randn(50, 32, generator=gen) * 0.2).bfloat16().requires_grad_()
    targets = torch.randint(0, 50, (21,), generator=gen)
    (chunked_cross_entropy_sum(hidden, weight, targets, chunk) / 21).backward()
    assert hidden.grad.dtype == weight.grad.dtype == torch.bfloat16
    h32 = hidden.detach().float().requires_grad_()
    w32 = weight.detach().float().requires_grad_()
    F.cross_entropy(h32 @ w32.t(), targets, reduction="mean").backward()
    torch.testing.assert_close(weight.grad.float(), w32.grad, rtol=2e-2, atol=2e-3)
    torch.testing.assert_close(hidden.grad.float(), h32.grad, rtol=2e-2, atol=2e-3)


@pytest.mark.parametrize(("dtype", "limit"), [(torch.float32, 1.05), (torch.bfloat16, 1.6)])
def test_the_head_holds_one_chunk_of_fp32_logits_at_a_time(dtype, limit):
    """Above what it keeps for backward (the two gradients), the head's forward holds
    one chunk's fp32 logits (their softmax and gradient in place), plus the bf16 copy
    a bf16 model multiplies with: not the previous chunk's tensors as well (4x before)."""
    from tests.trainer.live_bytes import LiveBytes

    vocab, dim, tokens, chunk = 8192, 64, 4096, 512
    gen = torch.Generator().manual_seed(0)
    hidden = torch.randn(tokens, dim, generator=gen).to(dtype).requires_grad_()
    weight = (torch.randn(vocab, dim, generator=gen) * 0.1).to(dtype).requires_grad_()
    targets = torch.randint(0, vocab, (tokens,), generator=gen)
    with LiveBytes(hidden, weight, targets) as probe:
        chunked_cross_entropy_sum(hidden, weight, targets, chunk)
    gradients = hidden.nbytes + vocab * dim * 4  # kept for backward (the weight's in fp32)
    one_chunk = chunk * vocab * 4
    assert (probe.peak - gradients) / one_chunk <= limit


def test_the_heads_bf16_weight_gradient_is_one_rounding_of_the_fp32_one():
    """64 chunks of bf16 gradients summed in bf16 rounded the running sum 64 times: 5.7x
    the error of rounding the exact gradient once (2.2x with 8 chunks). Summed in fp32
    and cast once it is 1.5x whatever the chunks (the eager bf16 head: 1.0-1.2x; the
    rest is the bf16 product of each chunk)."""
    gen = torch.Generator().manual_seed(3)
    tokens, dim, vocab, chunk = 4096, 64, 256, 64
    hidden = torch.randn(tokens, dim, generator=gen).bfloat16().requires_grad_()
    weight = (torch.randn(vocab, dim, generator=gen) * 0.1).bfloat16().requires_grad_()
    targets = torch.randint(0, vocab, (tokens,), generator=gen)
    (chunked_cross_entropy_sum(hidden, weight, targets, chunk) / tokens).backward()
    w32 = weight.detach().float().requires_grad_()
    F.cross_entropy(hidden.detach().float() @ w32.t(), targets).backward()
    exact, got = w32.grad, weight.grad
    assert exact is not None and got is not None
    one_rounding = (exact.bfloat16().float() - exact).norm()
    error = (got.float() - exact).norm()
    assert error <= 1.6 * one_rounding, (error / one_rounding).item()


def test_nothing_to_train_on_gives_zero_and_zero_gradients():
    hidden = torch.randn(4, 8, requires_grad=True)
    weight = torch.randn(5, 8, requires_grad=True)
    loss = chunked_cross_entropy_sum(hidden, weight, torch.full((4,), IGNORE_INDEX), 2)
    loss.backward()
    assert loss.item() == 0.0
    assert not hidden.grad.any() and not weight.grad.any()


@pytest.mark.parametrize("tied", [False, True])
def test_the_model_with_targets_returns_the_summed_loss_of_its_logits(tied):
    torch.manual_seed(0)
    cfg = ModelConfig(**{**CFG.__dict__, "tie_word_embeddings": tied})
    model = Transformer(cfg)
    assert isinstance(model.lm_head, LMHead) and isinstance(model.lm_head, torch.nn.Linear)
    tokens = torch.randint(0, 97, (2, 16))
    targets = torch.randint(0, 97, (2, 16))
    targets[0, :5] = IGNORE_INDEX
    summed = model(tokens, targets)
    summed.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    count = int(targets.ne(IGNORE_INDEX).sum())
    reference = token_loss(model(tokens), targets, masked=True) * count
    reference.backward()
    torch.testing.assert_close(summed, reference, rtol=1e-6, atol=1e-5)
    # atol: the head's softmax is exp(x - max) / sum, taken in place, a few fp32 ulps
    # from log_softmax's exp(x - lse) in the tied embedding's summed gradient.
    for name, param in model.named_parameters():
        torch.testing.assert_close(grads[name], param.grad, rtol=1e-5, atol=1e-5, msg=name)


def test_gqa_through_sdpa_equals_explicit_kv_repeats():
    torch.manual_seed(0)
    attn = Attention(CFG)
    x = torch.randn(2, 16, CFG.dim)
    cos, sin = rope_cos_sin(CFG.head_dim, 16, CFG.rope_theta)
    got = attn(x, cos, sin)

    from trainer.model import apply_rope

    q = attn.q_proj(x).view(2, 16, 4, 16).transpose(1, 2)
    k = attn.k_proj(x).view(2, 16, 2, 16).transpose(1, 2)
    v = attn.v_proj(x).view(2, 16, 2, 16).transpose(1, 2)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    k, v = k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    want = attn.o_proj(out.transpose(1, 2).reshape(2, 16, -1))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_evaluation_under_no_grad_gives_the_same_loss():
    gen = torch.Generator().manual_seed(1)
    hidden = torch.randn(9, 8, generator=gen, requires_grad=True)
    weight = torch.randn(6, 8, generator=gen, requires_grad=True)
    targets = torch.randint(0, 6, (9,), generator=gen)
    with torch.no_grad():
        evaluated = chunked_cross_entropy_sum(hidden, weight, targets, 4)
    assert not evaluated.requires_grad
    assert torch.equal(evaluated, chunked_cross_entropy_sum(hidden, weight, targets, 4).detach())
