"""Where checkpoints live on disk, and which of them are complete.

    <checkpoint_dir>/step-<N>/
        .metadata, __<rank>_0.distcp   torch.distributed.checkpoint files
        train_config.json              the run's TrainConfig (export rebuilds the model)
        tokenizer/                     tokenizer.json when the run used one
        COMPLETE                       written last: {"step", "world_size", "saved_at"}

A directory without COMPLETE is a save that was interrupted; it is never resumed from.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

MARKER = "COMPLETE"
CONFIG_FILE = "train_config.json"
TOKENIZER_DIR = "tokenizer"
_STEP_DIR = re.compile(r"^step-(\d+)$")


def step_dir(root: str | Path, step: int) -> Path:
    return Path(root) / f"step-{step}"


def step_of(path: str | Path) -> int | None:
    match = _STEP_DIR.match(Path(path).name)
    return int(match.group(1)) if match else None


def step_dirs(root: str | Path) -> list[Path]:
    """step-<N> directories under root, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(step_of(p), p) for p in root.iterdir() if p.is_dir() and step_of(p) is not None]
    return [p for _, p in sorted(found)]


def is_complete(path: str | Path) -> bool:
    return (Path(path) / MARKER).is_file()


def newest_complete(root: str | Path) -> tuple[Path | None, list[Path]]:
    """(newest complete step dir or None, incomplete dirs newer than it, newest first)."""
    skipped: list[Path] = []
    for path in reversed(step_dirs(root)):
        if is_complete(path):
            return path, skipped
        skipped.append(path)
    return None, skipped


def read_marker(path: str | Path) -> dict:
    return json.loads((Path(path) / MARKER).read_text(encoding="utf-8"))
