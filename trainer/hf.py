"""Hugging Face Llama format: config.json <-> ModelConfig, safetensors <-> our model.

Our parameter names are HF's without the leading `model.` (lm_head has none), so the
weight mapping is a prefix, never a permutation.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainer import hub, storage
from trainer.config import ConfigError, ModelConfig
from trainer.hf_config import HF_KEYS
from trainer.materialize import copy_shard, local_rows
from trainer.tokenizer import load_tokenizer


def hf_config_from_model(cfg: ModelConfig, dtype: str = "float32") -> dict[str, Any]:
    """ModelConfig -> an HF config dict that transformers and vLLM load: a family's own
    config.json as it was read, else the LlamaConfig of our model."""
    if cfg.hf_config is not None:
        return {**cfg.hf_config, "dtype": dtype, "torch_dtype": dtype}
    hf: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        # transformers 5 reads `dtype`; 4.x and vLLM read `torch_dtype`.
        "dtype": dtype,
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
            "original_max_position_embeddings": cfg.rope_scaling.original_max_position_embeddings,
        }
    # Both spellings: `rope_scaling` for transformers 4.x and vLLM, `rope_parameters`
    # for transformers 5.
    hf["rope_scaling"] = rope if cfg.rope_scaling is not None else None
    hf["rope_parameters"] = rope
    return hf


# --- weights ---------------------------------------------------------------------------

SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def _safetensors_files(directory: Path, where: str) -> list[Path]:
    """The weight files of an HF checkpoint directory: sharded (index) or single."""
    index = directory / SAFETENSORS_INDEX
    if index.is_file():
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
        return [directory / name for name in sorted(set(weight_map.values()))]
    if (directory / SAFETENSORS_FILE).is_file():
        return [directory / SAFETENSORS_FILE]
    raise ConfigError(f"{where} has no {SAFETENSORS_FILE} or {SAFETENSORS_INDEX}")


def _few(keys: set[str] | list[str], n: int = 5) -> str:
    shown = sorted(keys)[:n]
    return ", ".join(shown) + (f" (+{len(keys) - n} more)" if len(keys) > n else "")


def _names(model: nn.Module) -> tuple[Callable[[str], str], bool]:
    """(checkpoint name -> parameter name, whether lm_head is the embedding) of our
    Llama (names without `model.`) or a transformers model (the checkpoint's own
    names; old ones may lack the base model's prefix, as GPT-2's `h.0...`)."""
    own = getattr(model, "cfg", None)
    if own is not None:
        return (lambda name: name.removeprefix("model.")), own.tie_word_embeddings
    params = {name for name, _ in model.named_parameters()}
    params |= {name for name, _ in model.named_buffers()}
    prefix = getattr(model, "base_model_prefix", "") + "."
    renames = _checkpoint_renames(model)

    def rename(name: str) -> str:
        for pattern, replacement in renames:
            name = pattern.sub(replacement, name)
        return prefix + name if name not in params and prefix + name in params else name

    config = getattr(model, "config", None)
    return rename, bool(getattr(config, "tie_word_embeddings", False))


def _checkpoint_renames(model: nn.Module) -> list[tuple[re.Pattern[str], str]]:
    """transformers' own key renames for checkpoints saved in an older layout (EXAONE
    3.5's `transformer.h.N`, ...): what from_pretrained applies, as regexes."""
    try:
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightRenaming
    except ImportError:  # an older transformers: no renames
        return []
    renames = []
    for transform in get_model_conversion_mapping(model):  # type: ignore[arg-type]
        if type(transform) is WeightRenaming:
            (target,) = transform.target_patterns
            renames += [(re.compile(source), target) for source in transform.source_patterns]
    return renames


@torch.no_grad()
def load_hf_weights(model: nn.Module, name_or_path: str) -> None:
    """Copy an HF checkpoint's weights (local dir, s3:// prefix or hub id) into `model`,
    in place, cast to the model's dtype. The model may be sharded (FSDP2 DTensors):
    each rank then reads only its own rows of each tensor (safetensors slices), so no
    rank ever holds the whole state dict.

    Everything is checked before anything is copied; tensors are then read one at a
    time, so the peak memory is the model (or its shard) plus one tensor's share.
    """
    from safetensors import safe_open

    files = _safetensors_files(storage.fetch(hub.local_dir(name_or_path)), name_or_path)
    rename, tied = _names(model)
    # The parameters themselves (sharded or not); a tied lm_head appears once, as
    # embed_tokens.
    target = dict(model.named_parameters())
    # Buffers some checkpoints carry (GPT-2's attention masks) are derived, not loaded.
    buffers = {name for name, _ in model.named_buffers()}
    with contextlib.ExitStack() as stack:
        # our name -> (open file, HF name)
        found: dict[str, tuple[Any, str]] = {}
        for file in files:
            handle = stack.enter_context(safe_open(file, framework="pt"))
            for hf_name in handle.keys():
                # RoPE tables are derived from the config; old exports saved them anyway.
                if not hf_name.endswith("rotary_emb.inv_freq") and rename(hf_name) not in buffers:
                    found[rename(hf_name)] = (handle, hf_name)
        if tied:
            # lm_head IS embed_tokens; a checkpoint that still carries lm_head (saved
            # untied) must not silently overwrite the embedding.
            target.pop("lm_head.weight", None)
            found.pop("lm_head.weight", None)
        shapes = {k: tuple(h.get_slice(n).get_shape()) for k, (h, n) in found.items()}
        missing = set(target) - set(found)
        unexpected = set(found) - set(target)
        wrong_shape = [
            f"{k} {shapes[k]} vs model {tuple(target[k].shape)}"
            for k in sorted(set(target) & set(found))
            if shapes[k] != tuple(target[k].shape)
        ]
        problems = []
        if missing:
            problems.append(f"missing {len(missing)} tensors: {_few(missing)}")
        if unexpected:
            problems.append(f"unexpected {len(unexpected)} tensors: {_few(unexpected)}")
        if wrong_shape:
            problems.append(f"shape mismatch: {_few(wrong_shape)}")
        if problems:
            raise ConfigError(
                f"HF checkpoint {name_or_path} does not fit the model config: "
                + "; ".join(problems)
            )
        for name, (handle, hf_name) in found.items():
            rows = local_rows(target[name])
            # copy_ casts to the parameter's dtype and moves it to its device.
            copy_shard(target[name], handle.get_slice(hf_name)[rows], rows_only=True)


def hf_state_dict(
    state: dict[str, torch.Tensor], cfg: ModelConfig, dtype: torch.dtype | None = None
) -> dict[str, torch.Tensor]:
    """Our state dict -> HF names, as contiguous CPU tensors (cast to `dtype` if given)
    that share no storage: safetensors refuses tied or overlapping tensors."""
    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, tensor in state.items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue  # HF re-ties it from embed_tokens on load
        # A family's names are the checkpoint's own; ours lack Llama's `model.`.
        own = cfg.hf_config is not None or name.startswith("lm_head.")
        hf_name = name if own else f"model.{name}"
        t = tensor.detach().to(device="cpu", dtype=dtype or tensor.dtype)
        storage_ptr = t.untyped_storage().data_ptr()
        # Copy only where needed, so exporting a large model does not hold it twice.
        if storage_ptr in seen or not t.is_contiguous():
            t = t.clone(memory_format=torch.contiguous_format)
        seen.add(t.untyped_storage().data_ptr())
        out[hf_name] = t
    return out


def _shards(tensors: dict[str, torch.Tensor], max_bytes: int) -> list[dict[str, torch.Tensor]]:
    """Split in order into groups of at most max_bytes (a bigger tensor gets its own)."""
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, t in tensors.items():
        nbytes = t.numel() * t.element_size()
        if shards[-1] and size + nbytes > max_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = t
        size += nbytes
    return shards


def _special_token_ids(tokenizer_dir: Path | None) -> dict[str, int | None]:
    """bos/eos ids of the run's tokenizer; None where unknown (no tokenizer shipped),
    rather than transformers' default ids 1 and 2, which may be ordinary tokens here."""
    ids: dict[str, int | None] = {"bos_token_id": None, "eos_token_id": None}
    if tokenizer_dir is not None and (tokenizer_dir / "tokenizer.json").is_file():
        tok = load_tokenizer(str(tokenizer_dir))
        ids = {"bos_token_id": tok.bos_id, "eos_token_id": tok.eos_id}
    return ids


def save_hf(
    state: dict[str, torch.Tensor],
    cfg: ModelConfig,
    out_dir: Path,
    dtype: torch.dtype = torch.float32,
    tokenizer_dir: Path | None = None,
    max_shard_bytes: int = 5 * 2**30,
) -> list[Path]:
    """Write an HF Llama checkpoint directory (what `from_pretrained` and vLLM load):
    safetensors weights (sharded above max_shard_bytes), config.json,
    generation_config.json and the tokenizer files. Returns the files written."""
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # Weights of an earlier export with a different sharding would be loaded too.
    for stale in [*out_dir.glob("model*.safetensors"), out_dir / SAFETENSORS_INDEX]:
        stale.unlink(missing_ok=True)

    tensors = hf_state_dict(state, cfg, dtype)
    shards = _shards(tensors, max_shard_bytes)
    written: list[Path] = []
    weight_map: dict[str, str] = {}
    for i, shard in enumerate(shards, start=1):
        name = (
            SAFETENSORS_FILE
            if len(shards) == 1
            else f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        )
        save_file(shard, out_dir / name, metadata={"format": "pt"})
        written.append(out_dir / name)
        weight_map.update(dict.fromkeys(shard, name))
    if len(shards) > 1:
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        written.append(_write_json(out_dir / SAFETENSORS_INDEX, index))

    special = _special_token_ids(tokenizer_dir)
    dtype_name = str(dtype).removeprefix("torch.")
    written.append(
        _write_json(out_dir / "config.json", hf_config_from_model(cfg, dtype_name) | special)
    )
    known = {k: v for k, v in special.items() if v is not None}
    generation = {"_from_model_config": True, **known}
    written.append(_write_json(out_dir / "generation_config.json", generation))
    if tokenizer_dir is not None:
        for name in TOKENIZER_FILES:
            if (Path(tokenizer_dir) / name).is_file():
                written.append(Path(shutil.copy2(Path(tokenizer_dir) / name, out_dir / name)))
    return written


def _write_json(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path
