"""Where an HF config.json of any family keeps the sizes the trainer reads: one table
that hf_config.py (torch-free) and families.py (transformers) both read."""

from __future__ import annotations

from typing import Any

# ModelConfig fields the trainer reads of any family (sizes for the vocabulary check,
# FLOPs, the memory estimate, the sequence limit) -> the HF config keys that may hold
# them, first found wins.
SHAPE_KEYS = {
    "dim": ("hidden_size", "n_embd", "d_model"),
    "n_layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "n_heads": ("num_attention_heads", "n_head"),
    "n_kv_heads": ("num_key_value_heads", "num_attention_heads", "n_head"),
    "vocab_size": ("vocab_size",),
    "ffn_hidden_dim": ("intermediate_size", "n_inner"),
    "max_seq_len": ("max_position_embeddings", "n_positions", "n_ctx"),
    "tie_word_embeddings": ("tie_word_embeddings",),
}


def shape_value(hf: dict[str, Any], field: str) -> Any:
    """The value of ModelConfig `field` an HF config.json holds (SHAPE_KEYS), or None."""
    return next((hf[k] for k in SHAPE_KEYS[field] if hf.get(k) is not None), None)
