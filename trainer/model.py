"""A small Llama-style decoder in plain PyTorch.

Parameter names follow Hugging Face's LlamaForCausalLM without the leading `model.`
(`embed_tokens`, `layers.N.self_attn.q_proj`, `layers.N.mlp.gate_proj`,
`input_layernorm`, `post_attention_layernorm`, `norm`, `lm_head`), and RoPE uses HF's
rotate-half layout, so HF safetensors can be mapped 1:1 without permuting weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from trainer.config import ModelConfig, RopeScaling
from trainer.loss import chunked_cross_entropy_sum

INIT_STD = 0.02


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 for stability under bf16 compute, as HF does.
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)


def llama3_scaled_inv_freq(inv_freq: torch.Tensor, scaling: RopeScaling) -> torch.Tensor:
    """Llama-3.1 RoPE frequency scaling (HF rope_type "llama3").

    Long wavelengths (beyond original_max / low_freq_factor) are slowed down by
    `factor`, short ones (below original_max / high_freq_factor) are kept, and the
    band between is interpolated smoothly.
    """
    old_len = scaling.original_max_position_embeddings
    low_wavelen = old_len / scaling.low_freq_factor
    high_wavelen = old_len / scaling.high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / scaling.factor, inv_freq)
    smooth = (old_len / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
    in_band = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return torch.where(in_band, smoothed, scaled)


def rope_cos_sin(
    head_dim: int,
    max_seq_len: int,
    theta: float,
    scaling: RopeScaling | None = None,
    device: torch.device | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables of shape (max_seq_len, head_dim), HF rotate-half layout."""
    inv_freq = 1.0 / (
        theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim)
    )
    if scaling is not None:
        inv_freq = llama3_scaled_inv_freq(inv_freq, scaling)
    positions = torch.arange(max_seq_len, dtype=torch.float32, device=device)
    freqs = torch.outer(positions, inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (batch, heads, seq, head_dim); cos/sin: (seq, head_dim)."""
    return (x * cos + _rotate_half(x) * sin).to(x.dtype)


class Attention(nn.Module):
    """Grouped-query attention: n_kv_heads key/value heads shared by n_heads queries."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.n_kv_heads = cfg.n_kv_heads
        self.head_dim = cfg.head_dim
        self.q_proj = nn.Linear(cfg.dim, cfg.n_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.dim, cfg.n_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.n_heads * self.head_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        bsz, seq, _ = x.shape
        q = self.q_proj(x).view(bsz, seq, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(bsz, seq, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(bsz, seq, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # SDPA shares each KV head among its query heads itself (enable_gqa): no
        # repeat_interleave copies of K and V per step.
        out = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=self.n_heads != self.n_kv_heads
        )
        return self.o_proj(out.transpose(1, 2).reshape(bsz, seq, -1))


class MLP(nn.Module):
    """SwiGLU feed-forward: down(silu(gate(x)) * up(x))."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.down_proj = nn.Linear(cfg.hidden_dim, cfg.dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LMHead(nn.Linear):
    """The output projection. Given targets it returns the summed cross-entropy instead
    of the logits, computed in chunks (trainer.loss): the full fp32 logits never exist.
    Inside this module's own forward, so under FSDP2 its weight is gathered."""

    def forward(  # type: ignore[override]
        self, x: torch.Tensor, targets: torch.Tensor | None = None
    ) -> torch.Tensor:
        if targets is None:
            return super().forward(x)
        return chunked_cross_entropy_sum(x, self.weight, targets)


class TransformerBlock(nn.Module):
    """Pre-norm block; the unit FSDP shards and all-gathers one at a time."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.mlp = MLP(cfg)
        # Set by parallel.apply_activation_checkpointing: a torch.utils.checkpoint
        # wrapper that recomputes (some of) this block in backward. Wrapping the call
        # rather than the module keeps parameter names equal to HF's.
        self.checkpoint_fn: Callable[..., torch.Tensor] | None = None

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if self.checkpoint_fn is not None and torch.is_grad_enabled():
            return self.checkpoint_fn(self._forward, x, cos, sin)
        return self._forward(x, cos, sin)

    def _forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig, rope_len: int | None = None) -> None:
        """rope_len: positions to precompute RoPE tables for (default max_seq_len);
        training passes its seq_len so a 128k-context preset does not hold 128k rows."""
        super().__init__()
        self.cfg = cfg
        self.rope_len = min(rope_len or cfg.max_seq_len, cfg.max_seq_len)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(TransformerBlock(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.lm_head = LMHead(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:  # Llama 3.2 1B/3B share the input and output matrix
            self.lm_head.weight = self.embed_tokens.weight
        # Derived from config, so not saved in checkpoints (persistent=False).
        cos, sin = rope_cos_sin(cfg.head_dim, self.rope_len, cfg.rope_theta, cfg.rope_scaling)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.init_weights()

    @torch.no_grad()
    def init_rope(self, device: torch.device) -> None:
        """(Re)compute the RoPE tables on `device`: a model built on `meta` has none."""
        cfg = self.cfg
        cos, sin = rope_cos_sin(cfg.head_dim, self.rope_len, cfg.rope_theta, cfg.rope_scaling)
        self.rope_cos = cos.to(device)
        self.rope_sin = sin.to(device)

    @torch.no_grad()
    def init_weights(self) -> None:
        """Normal(0, 0.02) for every matrix, ones for norms (HF Llama's initializer)."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
            elif isinstance(module, RMSNorm):
                module.reset_parameters()

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """tokens: (batch, seq) int64 -> logits (batch, seq, vocab); with targets
        (batch, seq), the fp32 cross-entropy summed over the targets that are not
        IGNORE_INDEX (trainer.loss), without materialising the logits."""
        seq = tokens.shape[1]
        if seq > self.rope_len:
            raise ValueError(f"sequence length {seq} > {self.rope_len} positions (max_seq_len)")
        h = self.embed_tokens(tokens)
        cos, sin = self.rope_cos[:seq].to(h.dtype), self.rope_sin[:seq].to(h.dtype)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.lm_head(self.norm(h), targets)


def num_params(model: nn.Module) -> int:
    """Total (unsharded) parameter count; works before and after fully_shard."""
    return sum(p.numel() for p in model.parameters())
