"""Named model shapes (`--model_type`).

Each preset lists the ModelConfig fields it sets (plain dicts, so this module has no
imports and config.py can depend on it). The Llama shapes are those of the public
Hugging Face config.json files, so their checkpoints load 1:1; the debug ones exist
so that a CPU box can run a real multi-process job in under a minute.
"""

from __future__ import annotations

from typing import Any

# HF `rope_scaling` of Llama 3.1 and 3.2 (rope_type "llama3").
LLAMA_31_ROPE = {
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
LLAMA_32_ROPE = {**LLAMA_31_ROPE, "factor": 32.0}

PRESETS: dict[str, dict[str, Any]] = {
    # Fast enough for `torchrun --nproc_per_node=2` on a 2-core CPU machine.
    "debug": {
        "dim": 128,
        "n_layers": 2,
        "n_heads": 4,
        "n_kv_heads": 2,
        "vocab_size": 512,
        "multiple_of": 64,
        "max_seq_len": 512,
    },
    # Same family, big enough to be a meaningful smoke test on one GPU.
    "debug_large": {
        "dim": 512,
        "n_layers": 8,
        "n_heads": 8,
        "n_kv_heads": 4,
        "vocab_size": 512,
        "multiple_of": 128,
        "max_seq_len": 1024,
    },
    # meta-llama/Llama-2-7b-hf
    "llama_v2_7b": {
        "dim": 4096,
        "n_layers": 32,
        "n_heads": 32,
        "n_kv_heads": 32,
        "vocab_size": 32000,
        "ffn_hidden_dim": 11008,
        "max_seq_len": 4096,
        "rope_theta": 10000.0,
        "norm_eps": 1e-5,
    },
    # meta-llama/Llama-3.2-1B
    "llama_v3_1b": {
        "dim": 2048,
        "n_layers": 16,
        "n_heads": 32,
        "n_kv_heads": 8,
        "vocab_size": 128256,
        "ffn_hidden_dim": 8192,
        "max_seq_len": 131072,
        "rope_theta": 500000.0,
        "rope_scaling": LLAMA_32_ROPE,
        "norm_eps": 1e-5,
        "tie_word_embeddings": True,
    },
    # meta-llama/Llama-3.2-3B
    "llama_v3_3b": {
        "dim": 3072,
        "n_layers": 28,
        "n_heads": 24,
        "n_kv_heads": 8,
        "vocab_size": 128256,
        "ffn_hidden_dim": 8192,
        "max_seq_len": 131072,
        "rope_theta": 500000.0,
        "rope_scaling": LLAMA_32_ROPE,
        "norm_eps": 1e-5,
        "tie_word_embeddings": True,
    },
    # meta-llama/Llama-3.1-8B
    "llama_v3_8b": {
        "dim": 4096,
        "n_layers": 32,
        "n_heads": 32,
        "n_kv_heads": 8,
        "vocab_size": 128256,
        "ffn_hidden_dim": 14336,
        "max_seq_len": 131072,
        "rope_theta": 500000.0,
        "rope_scaling": LLAMA_31_ROPE,
        "norm_eps": 1e-5,
    },
    # openai-community/gpt2 (124M): the GPT-2 family, built by transformers' GPT2 classes
    # from its config.json (trainer/families.py); the fields above it only size it.
    "gpt2": {
        "dim": 768,
        "n_layers": 12,
        "n_heads": 12,
        "n_kv_heads": 12,
        "vocab_size": 50257,
        "ffn_hidden_dim": 3072,
        "max_seq_len": 1024,
        "tie_word_embeddings": True,
        "hf_config": {
            "model_type": "gpt2",
            "architectures": ["GPT2LMHeadModel"],
            "vocab_size": 50257,
            "n_positions": 1024,
            "n_embd": 768,
            "n_layer": 12,
            "n_head": 12,
            "activation_function": "gelu_new",
            "layer_norm_epsilon": 1e-5,
            "initializer_range": 0.02,
            "bos_token_id": 50256,
            "eos_token_id": 50256,
            "tie_word_embeddings": True,
        },
    },
}


# The names other FSDP documents use for `--model_type` (the FSDP-on-EKS document's
# llama_v2 / llama_v3) -> the preset they mean: its largest dense shape we carry.
ALIASES: dict[str, str] = {
    "llama_v2": "llama_v2_7b",
    "llama_v3": "llama_v3_8b",
    "llama2": "llama_v2_7b",
    "llama3": "llama_v3_8b",
}

# Names those documents use that are no preset here, and what to pass instead. A
# name here is refused at plan time and by the trainer with this advice.
NOT_PRESETS: dict[str, str] = {
    "gpt_neox": "GPT-NeoX has no preset; pass --model_name_or_path of an HF checkpoint",
    "mistral": "Mistral has no preset; pass --model_name_or_path of an HF Mistral checkpoint",
    "mixtral": "Mixtral (mixture of experts) is not supported by this trainer",
}


def preset_name(model_type: str) -> str | None:
    """The preset `model_type` names (itself or through an alias); None if none."""
    name = ALIASES.get(model_type, model_type)
    return name if name in PRESETS else None


def unknown_model_type(model_type: str) -> str:
    """Why `model_type` is refused, with the names that are accepted."""
    advice = NOT_PRESETS.get(model_type)
    valid = ", ".join([*PRESETS, *ALIASES])
    return (
        f"unknown model_type {model_type!r}"
        + (f" ({advice})" if advice else "")
        + f"; choose one of {valid}"
    )
