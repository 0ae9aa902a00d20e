"""Hugging Face Llama format: config.json <-> ModelConfig, safetensors <-> our model.

Our parameter names are HF's without the leading `model.` (lm_head has none), so the
weight mapping is a prefix, never a permutation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainer import storage
from trainer.config import ConfigError, ModelConfig, RopeScaling

# ModelConfig field -> HF LlamaConfig key
HF_KEYS = {
    "dim": "hidden_size",
    "n_layers": "num_hidden_layers",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "vocab_size": "vocab_size",
    "ffn_hidden_dim": "intermediate_size",
    "max_seq_len": "max_position_embeddings",
    "rope_theta": "rope_theta",
    "norm_eps": "rms_norm_eps",
    "tie_word_embeddings": "tie_word_embeddings",
}


def model_config_from_hf(hf: dict[str, Any]) -> ModelConfig:
    """An HF Llama config.json (as a dict) -> ModelConfig."""
    if hf.get("model_type", "llama") != "llama":
        raise ConfigError(f"model_type {hf.get('model_type')!r} is not a Llama checkpoint")
    fields = {ours: hf[theirs] for ours, theirs in HF_KEYS.items() if theirs in hf}
    fields.setdefault("n_kv_heads", fields.get("n_heads"))
    # transformers 5 nests rope settings in `rope_parameters`; 4.x has top-level keys.
    rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    if "rope_theta" in rope:
        fields["rope_theta"] = rope["rope_theta"]
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type == "llama3":
        fields["rope_scaling"] = RopeScaling(
            factor=rope["factor"],
            low_freq_factor=rope["low_freq_factor"],
            high_freq_factor=rope["high_freq_factor"],
            original_max_position_embeddings=rope["original_max_position_embeddings"],
        )
    elif rope_type != "default":
        raise ConfigError(f"unsupported rope_type {rope_type!r} (supported: default, llama3)")
    if hf.get("head_dim") not in (None, fields["dim"] // fields["n_heads"]):
        raise ConfigError("head_dim != hidden_size / num_attention_heads is not supported")
    return ModelConfig(**fields)


def hf_config_from_model(cfg: ModelConfig, dtype: str = "float32") -> dict[str, Any]:
    """ModelConfig -> an HF LlamaConfig dict that transformers and vLLM load."""
    hf: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": dtype,
        "head_dim": cfg.head_dim,
        "initializer_range": 0.02,
        "use_cache": True,
    }
    for ours, theirs in HF_KEYS.items():
        hf[theirs] = getattr(cfg, ours)
    hf["intermediate_size"] = cfg.hidden_dim
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope_scaling is not None:
        rope = {
            "rope_type": "llama3",
            "rope_theta": cfg.rope_theta,
            "factor": cfg.rope_scaling.factor,
            "low_freq_factor": cfg.rope_scaling.low_freq_factor,
            "high_freq_factor": cfg.rope_scaling.high_freq_factor,
            "original_max_position_embeddings": (
                cfg.rope_scaling.original_max_position_embeddings
            ),
        }
    # Both spellings: `rope_scaling` for transformers 4.x and vLLM, `rope_parameters`
    # for transformers 5.
    hf["rope_scaling"] = rope if cfg.rope_scaling is not None else None
    hf["rope_parameters"] = rope
    return hf


def read_model_config(name_or_path: str) -> ModelConfig:
    """config.json of an HF checkpoint directory (local or s3://) -> ModelConfig."""
    source = storage.join(name_or_path, "config.json")
    try:
        path = storage.fetch(source)
        hf = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot read {source}: {exc}; model_name_or_path must be an HF Llama "
            "checkpoint directory (config.json + *.safetensors), local or s3://"
        ) from exc
    return model_config_from_hf(hf)
