"""The Llama-style model: shapes, causality, GQA, HF parameter names, init."""

from __future__ import annotations

import pytest
import torch

from trainer.config import ModelConfig
from trainer.model import Transformer, num_params

TINY = ModelConfig(
    dim=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=64, multiple_of=16, max_seq_len=32
)


def make(**overrides) -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig(**{**TINY.__dict__, **overrides})
    return Transformer(cfg).eval()


def test_logits_have_batch_seq_vocab_shape():
    model = make()
    tokens = torch.randint(0, 64, (3, 11))
    assert model(tokens).shape == (3, 11, 64)


def test_changing_a_later_token_leaves_earlier_logits_unchanged():
    model = make()
    tokens = torch.randint(0, 64, (2, 16))
    changed = tokens.clone()
    changed[:, 10] = (changed[:, 10] + 1) % 64
    with torch.no_grad():
        a, b = model(tokens), model(changed)
    torch.testing.assert_close(a[:, :10], b[:, :10])
    assert not torch.allclose(a[:, 10:], b[:, 10:])


@pytest.mark.parametrize("n_kv_heads", [1, 2, 4])
def test_grouped_query_attention_with_fewer_kv_heads(n_kv_heads):
    model = make(n_kv_heads=n_kv_heads)
    attn = model.layers[0].self_attn
    head_dim = 32 // 4
    assert attn.q_proj.weight.shape == (4 * head_dim, 32)
    assert attn.k_proj.weight.shape == (n_kv_heads * head_dim, 32)
    assert attn.v_proj.weight.shape == (n_kv_heads * head_dim, 32)
    out = model(torch.randint(0, 64, (2, 8)))
    assert out.shape == (2, 8, 64) and torch.isfinite(out).all()


def test_parameter_names_follow_hf_llama():
    names = {name for name, _ in make(n_layers=1).named_parameters()}
    assert names == {
        "embed_tokens.weight",
        "layers.0.input_layernorm.weight",
        "layers.0.self_attn.q_proj.weight",
        "layers.0.self_attn.k_proj.weight",
        "layers.0.self_attn.v_proj.weight",
        "layers.0.self_attn.o_proj.weight",
        "layers.0.post_attention_layernorm.weight",
        "layers.0.mlp.gate_proj.weight",
        "layers.0.mlp.up_proj.weight",
        "layers.0.mlp.down_proj.weight",
        "norm.weight",
        "lm_head.weight",
    }
    # RoPE tables are derived from the config and stay out of checkpoints.
    assert set(make().state_dict()) == {n for n, _ in make().named_parameters()}


def test_ffn_width_is_llama_rounding_or_explicit():
    assert ModelConfig(dim=128, multiple_of=64).hidden_dim == 384  # 8/3*128=341 -> 384
    assert ModelConfig(dim=128, ffn_hidden_dim=500).hidden_dim == 500
    assert make().layers[0].mlp.gate_proj.weight.shape == (TINY.hidden_dim, 32)


def test_init_is_normal_002_with_unit_norms_and_untied_head():
    model = make(dim=256, n_heads=8, n_kv_heads=8, vocab_size=512)
    std = model.layers[0].self_attn.q_proj.weight.std().item()
    assert 0.018 < std < 0.022
    assert torch.equal(model.norm.weight, torch.ones(256))
    assert model.lm_head.weight.data_ptr() != model.embed_tokens.weight.data_ptr()
    assert num_params(model) == sum(p.numel() for p in model.parameters())


def test_fresh_model_predicts_near_uniform():
    # Small init -> initial loss close to ln(vocab), the start of every healthy run.
    model = make(vocab_size=64)
    tokens = torch.randint(0, 64, (4, 16))
    with torch.no_grad():
        logits = model(tokens)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens.flatten())
    assert abs(loss.item() - torch.log(torch.tensor(64.0)).item()) < 0.1


def test_sequence_longer_than_max_seq_len_is_rejected():
    with pytest.raises(ValueError, match="max_seq_len"):
        make()(torch.zeros(1, 33, dtype=torch.long))
