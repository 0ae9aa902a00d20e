"""Export a training checkpoint as a Hugging Face model directory (Llama, or the
family of the checkpoint the run started from, with that checkpoint's config.json).

    python -m trainer.export --checkpoint <root-or-step-dir> --out <dir|s3://...>
        [--dtype float32|bfloat16]

--checkpoint is a checkpoint root (the newest complete step is exported) or one
step-<N> directory (it must be complete), local or s3://. The model is rebuilt from
the step's train_config.json and its weights read from the DCP files in one process,
no process group needed. The output loads with `LlamaForCausalLM.from_pretrained`
and vLLM, with the run's tokenizer (the byte-level one as an equivalent
tokenizer.json). stdout is one JSON line: {"event": "exported", ...} or {"event": "error",
...}; the exit code is 2 for bad input, 1 for anything else.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed.checkpoint as dcp

from trainer import families, hf, storage
from trainer.checkpoint_layout import (
    CONFIG_FILE,
    MARKER,
    TOKENIZER_DIR,
    is_complete,
    newest_intact,
    s3_steps,
    step_of,
    verify_checkpoint,
)
from trainer.config import ConfigError, ModelConfig, RopeScaling
from trainer.model import Transformer
from trainer.tokenizer import ByteTokenizer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class _Parser(argparse.ArgumentParser):
    # argparse prints usage and exits 2 on its own; we owe the caller a JSON line.
    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)


def _newest_complete_s3(uri: str) -> str:
    """The s3:// step to export: `uri` itself if it is a step-<N> prefix, else the
    newest complete step under it. Only that step is downloaded, never the whole root."""
    uri = uri.rstrip("/")
    if step_of(uri.rsplit("/", 1)[-1]) is not None:
        _, prefix = storage.split_s3(uri + "/")
        rel_keys = [key[len(prefix) :] for key in storage.list_s3(uri + "/")]
        if MARKER not in rel_keys:
            raise ConfigError(f"checkpoint {uri} is not complete (no {MARKER})")
        return uri
    steps = [step for step, complete in s3_steps(uri).items() if complete]
    if not steps:
        raise ConfigError(f"no complete checkpoint under {uri}")
    return storage.join(uri, f"step-{max(steps)}")


def resolve_step(checkpoint: str, download_root: Path) -> tuple[Path, int]:
    """(local step directory, step number) of the checkpoint to export."""
    if storage.is_s3(checkpoint):
        step_uri = _newest_complete_s3(checkpoint)
        step = step_of(step_uri.rsplit("/", 1)[-1])
        try:
            return storage.fetch(step_uri, cache_root=download_root), step
        except FileNotFoundError as exc:
            raise ConfigError(str(exc)) from exc
    path = Path(checkpoint)
    if not path.is_dir():
        raise ConfigError(f"checkpoint {checkpoint} does not exist")
    step = step_of(path)
    if step is not None:
        if not is_complete(path):
            raise ConfigError(f"checkpoint {path} is not complete (no {MARKER})")
        if problem := verify_checkpoint(path):
            raise ConfigError(f"checkpoint {path} is damaged: {problem}")
        return path, step
    # The newest complete step that verifies: a damaged newer one is passed over.
    newest, skipped = newest_intact(path)
    if newest is None:
        seen = f" ({'; '.join(f'{p.name}: {why}' for p, why in skipped)})" if skipped else ""
        raise ConfigError(f"no complete, intact checkpoint under {path}{seen}")
    return newest, step_of(newest)


def model_config(step_path: Path) -> ModelConfig:
    """The ModelConfig the run trained, from its train_config.json."""
    try:
        fields = dict(json.loads((step_path / CONFIG_FILE).read_text(encoding="utf-8"))["model"])
        if fields.get("rope_scaling") is not None:
            fields["rope_scaling"] = RopeScaling(**fields["rope_scaling"])
        return ModelConfig(**fields)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"cannot rebuild the model from {step_path / CONFIG_FILE}: {exc}"
        ) from exc


def _check_saved_tensors(step_path: Path, state: dict[str, torch.Tensor]) -> None:
    """The DCP metadata must hold exactly the model that train_config.json describes:
    DCP itself fails on a missing tensor with a long traceback, and silently skips a
    saved tensor the config does not know (say, an extra layer)."""
    try:
        metadata = dcp.FileSystemReader(str(step_path)).read_metadata().state_dict_metadata
    except FileNotFoundError as exc:
        raise ConfigError(f"{step_path} holds no DCP checkpoint (.metadata)") from exc
    saved = {
        key.removeprefix("model."): tuple(getattr(meta, "size", ()))
        for key, meta in metadata.items()
        if key.startswith("model.")
    }
    problems = [
        f"{name} {saved[name]} vs config {tuple(t.shape)}" if name in saved else f"{name} missing"
        for name, t in state.items()
        if saved.get(name) != tuple(t.shape)
    ]
    # A tied lm_head may be saved under its own name too; it is embed_tokens.
    extra = [name for name in saved if name not in state and name != "lm_head.weight"]
    problems += [f"{name} unexpected" for name in extra]
    if problems:
        more = f" (+{len(problems) - 5} more)" if len(problems) > 5 else ""
        raise ConfigError(
            f"{step_path} does not match its {CONFIG_FILE}: {'; '.join(problems[:5])}{more}"
        )


def load_weights(step_path: Path, cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """The model tensors of a DCP checkpoint, read in this process (no process group).

    The trainer saved {"model": ..., "optim": ..., "train": ...}; only the model
    entries are read. A meta-device model supplies names and shapes without the cost
    of initialising weights that are overwritten anyway."""
    if cfg.hf_config is not None:  # another family: its transformers class
        shapes = families.build_meta(cfg.hf_config).state_dict()
    else:
        with torch.device("meta"):
            shapes = Transformer(cfg, rope_len=1).state_dict()
    if cfg.tie_word_embeddings:
        shapes.pop("lm_head.weight")  # the same tensor as embed_tokens.weight
    state = {name: torch.empty(t.shape, dtype=t.dtype) for name, t in shapes.items()}
    _check_saved_tensors(step_path, state)
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": yes
        warnings.simplefilter("ignore", UserWarning)
        dcp.load({"model": state}, checkpoint_id=str(step_path), no_dist=True)
    return state


def _trained_with_byte_tokenizer(step_path: Path) -> bool:
    """The run's train_config.json names no tokenizer (the byte-level default)."""
    try:
        run = json.loads((step_path / CONFIG_FILE).read_text(encoding="utf-8"))
        return run.get("data", {}).get("tokenizer") is None
    except (OSError, ValueError, AttributeError):
        return False


def export(checkpoint: str, out: str, dtype: torch.dtype) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="trainer-export-") as tmp:
        step_path, step = resolve_step(checkpoint, Path(tmp, "checkpoint"))
        cfg = model_config(step_path)
        state = load_weights(step_path, cfg)
        tokenizer_dir = step_path / TOKENIZER_DIR
        if not tokenizer_dir.is_dir() and _trained_with_byte_tokenizer(step_path):
            # The byte tokenizer ships no files; write its HF equivalent, so the export
            # is a complete model directory a server (transformers serve, vLLM) loads.
            tokenizer_dir = Path(tmp, "byte-tokenizer")
            ByteTokenizer().save_hf(tokenizer_dir)
        # s3:// output is written locally first, then uploaded with config.json
        # last: a reader that sees config.json finds the weights already there.
        local_out = Path(tmp, "export") if storage.is_s3(out) else Path(out)
        files = hf.save_hf(
            state, cfg, local_out, dtype, tokenizer_dir if tokenizer_dir.is_dir() else None
        )
        if storage.is_s3(out):
            storage.upload_dir(local_out, out, last=("config.json",))
    return {
        "event": "exported",
        "step": step,
        "out": out,
        "files": sorted(p.name for p in files),
        "params": sum(t.numel() for t in state.values()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="python -m trainer.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="checkpoint root or step dir")
    parser.add_argument("--out", required=True, help="output dir or s3:// prefix")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    try:
        args = parser.parse_args(argv)
        result = export(args.checkpoint, args.out, DTYPES[args.dtype])
    # CheckpointException is a BaseException; every failure must become one JSON line.
    except (Exception, dcp.CheckpointException) as exc:
        print(json.dumps({"event": "error", "error_type": type(exc).__name__, "message": str(exc)}))
        return 2 if isinstance(exc, ConfigError) else 1
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
