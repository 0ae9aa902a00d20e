"""Reads back an offline W&B run (`WANDB_MODE=offline`): the `run-<id>.wandb` file the
SDK's wandb-core writes, as `wandb sync` uploads it. wandb 0.31 ships no Python reader
of it (its datastore moved into the Go core), so the file's framing is read here and
each record is parsed by wandb's own protobuf schema (wandb.proto.wandb_internal_pb2).

The framing (wandb-core's store, LevelDB's log format): a 7-byte header (":W&B", a
2-byte magic, a version byte), then records in 32 KiB blocks, each chunk a 7-byte
header (CRC32C: 4, length: 2, type: 1 FULL, 2 FIRST, 3 MIDDLE, 4 LAST) and its bytes; a
block's tail shorter than a chunk header is padding."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FILE_HEADER = 7
MAGIC = b":W&B"
BLOCK = 32 * 1024
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path) -> Iterator[Any]:
    """Each wandb_internal_pb2.Record of the file, in order."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    if data[:4] != MAGIC:
        raise ValueError(f"{path} is not a W&B run file (header {data[:7]!r})")
    at, pending = FILE_HEADER, b""
    while at + CHUNK_HEADER <= len(data):
        left = BLOCK - at % BLOCK
        if left < CHUNK_HEADER:  # the block's padding
            at += left
            continue
        _, length, kind = struct.unpack("<IHB", data[at : at + CHUNK_HEADER])
        chunk = data[at + CHUNK_HEADER : at + CHUNK_HEADER + length]
        at += CHUNK_HEADER + length
        if kind == 0 and length == 0:  # zeros to the block's end
            at += BLOCK - at % BLOCK if at % BLOCK else 0
            continue
        if kind in (FULL, FIRST):
            pending = chunk
        else:
            pending += chunk
        if kind in (FULL, LAST):
            record = pb.Record()
            record.ParseFromString(pending)
            yield record


def read_run(run_dir: Path) -> dict[str, Any]:
    """{"run": RunRecord, "config": {key: value}, "history": {key: {step: value}},
    "summary": {key: value}, "exit_code": int | None} of an offline run directory."""
    (path,) = run_dir.glob("run-*.wandb")
    found: dict[str, Any] = {"run": None, "config": {}, "history": {}, "summary": {},
                             "exit_code": None}  # fmt: skip
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            found["run"] = record.run
            found["config"].update(_items(record.run.config.update))
        elif kind == "config":
            found["config"].update(_items(record.config.update))
        elif kind == "history":
            items = _items(record.history.item)
            step = items.pop("_step", None)
            for key, value in items.items():
                if not key.startswith("_"):
                    found["history"].setdefault(key, {})[step] = value
        elif kind == "summary":
            found["summary"].update(_items(record.summary.update))
        elif kind == "exit":
            found["exit_code"] = record.exit.exit_code
    return found


def _items(items: Any) -> dict[str, Any]:
    """{key: value} of config, history or summary items (a key, or a nested key joined)."""
    return {item.key or ".".join(item.nested_key): json.loads(item.value_json) for item in items}
