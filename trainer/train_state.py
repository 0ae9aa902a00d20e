"""What a checkpoint holds of a run, and putting it back."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from torch import nn
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from trainer.checkpoint import rng_state, set_rng_state
from trainer.checkpoint_layout import CONFIG_FILE
from trainer.config import ConfigError, TrainConfig
from trainer.stream import Batches


def train_state(
    model: nn.Module,
    optimizer: Any,
    scheduler: Any,
    batches: Batches,
    step: int,
) -> dict[str, Any]:
    """Everything a resumed run needs to continue exactly where this one is.

    Sharded model/optimizer tensors keep their DTensor layout, so each rank saves
    only its shard and DCP can reshard on load to another world size.
    """
    return {
        "model": get_model_state_dict(model),
        "optim": get_optimizer_state_dict(model, optimizer),
        "train": {
            "step": step,
            "scheduler": scheduler.state_dict(),
            "data": batches.state_dict(),
            "rng": rng_state(),
        },
    }


def restore_train_state(
    state: dict[str, Any], model: nn.Module, optimizer: Any, scheduler: Any, batches: Batches
) -> int:
    set_model_state_dict(model, state["model"])
    set_optimizer_state_dict(model, optimizer, state["optim"])
    scheduler.load_state_dict(state["train"]["scheduler"])
    batches.load_state_dict(state["train"]["data"])
    set_rng_state(state["train"]["rng"])
    return int(state["train"]["step"])


def check_same_model(path: Path, cfg: TrainConfig) -> None:
    """A checkpoint of another model shape cannot be resumed; say so plainly instead
    of failing deep inside DCP with a shape mismatch."""
    saved = json.loads((path / CONFIG_FILE).read_text(encoding="utf-8"))["model"]
    ours = dataclasses.asdict(cfg.model)
    changed = sorted(k for k in ours if saved.get(k) != ours[k])
    if changed:
        diffs = ", ".join(f"{k} {saved.get(k)!r} -> {ours[k]!r}" for k in changed[:4])
        raise ConfigError(
            f"checkpoint {path} holds a different model ({diffs}); use a new "
            "--checkpoint_dir (or a new job name) to start over"
        )


def check_same_data_record(path: Path, batches: Batches) -> None:
    """A checkpoint whose data position lacks a part this run records (a stream's saved
    before it named its dataset) cannot say which data it counted: refused plainly, not
    as DCP's missing key deep in the load (which blames a damaged step)."""
    saved = FileSystemReader(str(path)).read_metadata().state_dict_metadata
    missing = sorted(k for k in batches.state_dict() if f"train.data.{k}" not in saved)
    if missing:
        raise ConfigError(
            f"cannot resume from {path}: its data position has no {', '.join(missing)} "
            "(saved by an older trainer), so which data it counted is unknown; use a new "
            "--checkpoint_dir (or a new job name) to start over"
        )
