"""Hugging Face config.json -> ModelConfig, without torch: the trainer's start reads a
checkpoint's shape here, and the tools' dry runs check a job against the same rules
(skills/training_job_deployer/trainer_checks.py) without the trainer's heavy imports.
A family other than Llama is built by transformers (trainer/families.py, imported only
for such a checkpoint)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainer import hub, storage
from trainer.config import ConfigError, ModelConfig, RopeScaling
from trainer.hf_shape import shape_value


def max_positions(hf: dict[str, Any]) -> int | None:
    """The longest sequence a checkpoint's config.json allows (None: it does not say)."""
    value = shape_value(hf, "max_seq_len")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


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


def model_config_from_hf(hf: dict[str, Any], trust_remote_code: bool = False) -> ModelConfig:
    """An HF config.json (as a dict) -> ModelConfig: the trainer's own Llama where it
    fits, else the transformers class of its family (trainer/families.py)."""
    try:
        return _llama_config(hf)
    except ConfigError:
        if hf.get("model_type", "llama") == "llama" and not hf.get("auto_map"):
            raise
    from trainer import families  # torch and transformers: only for such a family

    families.check_supported(hf, trust_remote_code)
    return ModelConfig(**families.shape_fields(hf), hf_config=dict(hf))


def _llama_config(hf: dict[str, Any]) -> ModelConfig:
    if hf.get("model_type", "llama") != "llama" or hf.get("auto_map"):
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


def read_model_config(name_or_path: str, trust_remote_code: bool = False) -> ModelConfig:
    """config.json of an HF checkpoint (local dir, s3:// prefix or hub id) -> ModelConfig.
    A hub id is downloaded here, once per node (trainer/hub.py)."""
    source = storage.join(hub.local_dir(name_or_path), "config.json")
    try:
        path = storage.fetch(source)
        hf = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"cannot read {source}: {exc}; model_name_or_path must be an HF "
            "checkpoint directory (config.json + *.safetensors), local, s3:// or a hub id"
        ) from exc
    return model_config_from_hf(hf, trust_remote_code)
