"""Any Hugging Face decoder-only causal LM under FSDP2: Mistral, Qwen2/3, Gemma 2/3,
EXAONE, Phi-3, OLMo 2, Granite, GPT-2, ... (whatever class the pinned transformers has
for a checkpoint's `model_type`). Llama itself keeps the trainer's own model
(trainer/model.py); everything else is the transformers class, built like it:

    build_meta(hf_config)     the model on `meta` from its config.json (no weights)
    parallel.decoder_layers   its decoder layers, found from the model (FSDP/AC/compile units)
    materialize(model, dev)   this rank's shards allocated, derived buffers (RoPE tables,
                              Gemma's embedding scale) recomputed from the config
    hf.load_hf_weights        weights read per shard from the checkpoint's safetensors

The model's parameter names are the checkpoint's own, so a training checkpoint exports
back to the same format with the same config.json (hf.save_hf). A `model_type` whose
code is not in transformers (an `auto_map` pointing at the checkpoint's own .py files)
runs that code only when the user opts in (--trust_remote_code).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor

from trainer.config import ConfigError
from trainer.data import IGNORE_INDEX
from trainer.hf_shape import SHAPE_KEYS, shape_value
from trainer.materialize import fill_normal_rows


def shape_fields(hf: dict[str, Any]) -> dict[str, Any]:
    """The ModelConfig shape fields an HF config.json holds (others keep their defaults)."""
    fields: dict[str, Any] = {}
    for ours in SHAPE_KEYS:
        if (value := shape_value(hf, ours)) is not None:
            fields[ours] = value
    # GPT-2 style configs leave the FFN width implicit (4 x hidden) and tie by default.
    if "ffn_hidden_dim" not in fields and "dim" in fields:
        fields["ffn_hidden_dim"] = 4 * fields["dim"]
    if "tie_word_embeddings" not in fields:  # the family's default (GPT-2, Gemma: tied)
        from transformers import CONFIG_MAPPING

        known = hf.get("model_type") in CONFIG_MAPPING and not hf.get("auto_map")
        fields["tie_word_embeddings"] = bool(known and _config(hf).tie_word_embeddings)
    return fields


def check_supported(hf: dict[str, Any], trust_remote_code: bool) -> None:
    """Refuse, with the reason, a config this trainer cannot build: code that is not in
    transformers (unless opted in), or a class that is not a decoder-only causal LM."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = hf.get("model_type")
    if model_type not in CONFIG_MAPPING or hf.get("auto_map"):
        if not trust_remote_code:
            raise ConfigError(
                f"model_type {model_type!r} needs the checkpoint's own Python code (not in "
                "transformers); to run it, if you trust it, set TRAINER_TRUST_REMOTE_CODE=true "
                "(deploy_training_job: env)"
            )
        return
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        raise ConfigError(f"model_type {model_type!r} is not a causal language model")
    if getattr(_config(hf), "is_encoder_decoder", False):
        raise ConfigError(f"model_type {model_type!r} is an encoder-decoder model")


def _config(hf: dict[str, Any], trust_remote_code: bool = False, source: str | None = None) -> Any:
    from transformers import AutoConfig

    if trust_remote_code and source is not None:
        return AutoConfig.from_pretrained(source, trust_remote_code=True)
    fields = {k: v for k, v in hf.items() if k not in ("model_type", "transformers_version")}
    return AutoConfig.for_model(hf["model_type"], **fields)


def build_meta(
    hf: dict[str, Any], trust_remote_code: bool = False, source: str | None = None
) -> nn.Module:
    """The transformers model for an HF config on the meta device: structure only."""
    from transformers import AutoModelForCausalLM

    config = _config(hf, trust_remote_code, source)
    config.use_cache = False  # training: no KV cache in the outputs
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(
            config, torch_dtype=torch.float32, trust_remote_code=trust_remote_code
        )
    # The trainer's own model's contract (model.Transformer.forward): logits, or with
    # targets the cross-entropy summed over them. An instance attribute: FSDP2's hooks
    # run around it all the same.
    model.forward = partial(_forward, model.forward)
    return model


def _forward(
    hf_forward: Any, tokens: torch.Tensor, targets: torch.Tensor | None = None
) -> torch.Tensor:
    """logits (batch, seq, vocab); with targets, the fp32 cross-entropy summed over the
    targets that are not IGNORE_INDEX. The family's own head computes the logits (Gemma's
    soft-capping included), so they exist whole here, unlike in our Llama's chunked head."""
    logits = hf_forward(input_ids=tokens).logits
    if targets is None:
        return logits
    return F.cross_entropy(
        logits.float().flatten(0, 1),
        targets.flatten(),
        ignore_index=IGNORE_INDEX,
        reduction="sum",
    )


@torch.no_grad()
def materialize(model: nn.Module, device: torch.device) -> None:
    """Allocate this rank's shards (uninitialized) on `device`, then compute the buffers
    that are derived from the config and never saved (RoPE frequencies, embedding
    scales) with the model's own initializer, module by module."""
    persistent = set(model.state_dict())
    owners = {
        name.rpartition(".")[0] for name, _ in model.named_buffers() if name not in persistent
    }
    model.to_empty(device=device)
    model.tie_weights()  # to_empty allocates each parameter anew, tied ones too
    for name in sorted(owners):
        # _init_weights also re-initializes the module's own parameters: harmless, as
        # the checkpoint (or the resumed state) is loaded over them afterwards.
        model._init_weights(model.get_submodule(name))  # type: ignore[operator]


@torch.no_grad()
def init_random(model: nn.Module, seed: int, std: float = 0.02) -> None:
    """A family model trained from scratch (a preset such as gpt2, no checkpoint): every
    matrix Normal(0, std) (the config's initializer_range), biases zero, norm weights
    one; each rank draws only its own rows, the same rows whatever the sharding."""
    std = float(getattr(getattr(model, "config", None), "initializer_range", std) or std)
    seen: set[int] = set()
    for key, (name, param) in enumerate(model.named_parameters()):
        if id(param) in seen:  # a tied weight: drawn once, as its first name
            continue
        seen.add(id(param))
        local = param.to_local() if isinstance(param, DTensor) else param
        if param.dim() >= 2:
            fill_normal_rows(param, seed, key, std)
        else:
            local.fill_(0.0 if name.endswith("bias") else 1.0)
