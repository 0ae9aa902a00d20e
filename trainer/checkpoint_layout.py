"""Where checkpoints live on disk, and which of them are complete.

    <checkpoint_dir>/step-<N>/
        .metadata, __<rank>_0.distcp   torch.distributed.checkpoint files
        train_config.json              the run's TrainConfig (export rebuilds the model)
        tokenizer/                     tokenizer.json when the run used one
        COMPLETE                       written last: {"step", "world_size", "saved_at"}

A directory without COMPLETE is a save that was interrupted; it is never resumed from.
One with COMPLETE is still checked before it is trusted (verify_checkpoint): a shard
deleted or cut short afterwards would otherwise fail every resume inside DCP.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from torch.distributed.checkpoint import FileSystemReader

from trainer import storage

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


def verify_checkpoint(path: str | Path) -> str | None:
    """What is wrong with step dir `path`, or None when it looks loadable: its DCP
    metadata reads, and every file the metadata names is there and at least as long
    as the last byte it points into. Corrupt bytes inside a file of the right size
    pass; the load itself catches those."""
    path = Path(path)
    try:
        metadata = FileSystemReader(str(path)).read_metadata()
    except FileNotFoundError:
        return ".metadata missing"
    except Exception as exc:  # a cut-off or garbled pickle fails in many ways
        return f".metadata unreadable ({type(exc).__name__})"
    needed: dict[str, int] = {}
    for info in (metadata.storage_data or {}).values():
        end = info.offset + info.length
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), end)
    if not needed:
        return ".metadata names no shard files"
    for name, size in sorted(needed.items()):
        try:
            actual = (path / name).stat().st_size
        except FileNotFoundError:
            return f"shard {name} missing"
        if actual < size:
            return f"shard {name} truncated ({actual} of {size} bytes)"
    if not (path / CONFIG_FILE).is_file():  # resume and export read the run's config
        return f"{CONFIG_FILE} missing"
    return None


def s3_steps(uri: str) -> dict[int, bool]:
    """The step-<N> prefixes under an s3:// checkpoint root, each with whether it is
    complete (its COMPLETE marker directly inside it), from one listing: the one reading
    of an S3 root, for resume and export alike."""
    root = uri.rstrip("/") + "/"
    _, prefix = storage.split_s3(root)
    steps: dict[int, bool] = {}
    for key in storage.list_s3(root):
        parts = key[len(prefix) :].split("/")
        step = step_of(parts[0])
        if step is not None:
            steps[step] = steps.get(step, False) or parts[1:] == [MARKER]
    return steps


def newest_intact(root: str | Path) -> tuple[Path | None, list[tuple[Path, str]]]:
    """(newest complete step dir that verifies, or None; the newer dirs passed over,
    newest first, each with the reason)."""
    skipped: list[tuple[Path, str]] = []
    for path in reversed(step_dirs(root)):
        if not is_complete(path):
            skipped.append((path, "no COMPLETE marker"))
            continue
        problem = verify_checkpoint(path)
        if problem is None:
            return path, skipped
        skipped.append((path, f"damaged: {problem}"))
    return None, skipped


def read_marker(path: str | Path) -> dict:
    return json.loads((Path(path) / MARKER).read_text(encoding="utf-8"))
