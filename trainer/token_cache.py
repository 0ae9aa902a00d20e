"""A dataset tokenized once into a memory-mapped token file, reused by every start.

The file holds the stream `tokenize_documents` would build (BOS + doc + EOS, in order)
as uint16 (vocabulary <= 65536) or uint32. Its name is a hash of the dataset (each
file's path, size and mtime, or the hub name), the tokenizer (its files' bytes) and
the format, so a change to any of them makes a new file. It lives on local disk under
$FSDP_EKS_CACHE_DIR (else ~/.cache/trainer)/tokens, one per host: the ranks of a host
each tokenize a contiguous slice of the documents (a part file), local rank 0 joins
the parts in order and renames the result into place. A start that finds the file
reads no documents at all; training windows are read from the memory map.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from trainer import storage
from trainer.data import encode_with_mask
from trainer.tokenizer import Tokenizer

FORMAT_VERSION = 1
# --train_on assistant: a uint8 loss mask, token for token, in `<token file>.mask`.
MASK_SUFFIX = ".mask"
# Documents per tokenizer call while building: bounds the ids held in memory.
DOCS_PER_BATCH = 256


def token_dtype(n_vocab: int) -> type[np.unsignedinteger]:
    return np.uint16 if n_vocab <= 2**16 else np.uint32


def _files_fingerprint(path: Path) -> list[tuple[str, int, int]]:
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return [(str(f), f.stat().st_size, f.stat().st_mtime_ns) for f in files]


def dataset_fingerprint(dataset: str, config_name: str | None) -> object:
    """What identifies the dataset without reading it."""
    if storage.is_s3(dataset):  # downloaded once per host into storage's cache
        return _files_fingerprint(storage.fetch(dataset))
    local = Path(dataset).expanduser()
    if local.exists():
        return _files_fingerprint(local.resolve())
    return ["hub", dataset, config_name]


def tokenizer_fingerprint(tokenizer: Tokenizer, spec: str | None) -> object:
    """`spec` is the --tokenizer setting (a hub name may ship no files to hash)."""
    digest = hashlib.sha256()
    for file in sorted(tokenizer.files):
        digest.update(Path(file).read_bytes())
    return [spec, type(tokenizer).__name__, tokenizer.n_vocab, tokenizer.bos_id, tokenizer.eos_id,
            digest.hexdigest()]  # fmt: skip


def token_file(
    dataset: str,
    config_name: str | None,
    tokenizer: Tokenizer,
    tokenizer_spec: str | None,
    root: Path | None = None,
    train_on: str = "all",
) -> Path:
    """Where the token stream of this dataset + tokenizer + format is (to be) cached.
    --train_on assistant renders chats turn by turn: another stream, another key."""
    source = dataset_fingerprint(dataset, config_name)
    tokens = tokenizer_fingerprint(tokenizer, tokenizer_spec)
    fmt: list[object] = [FORMAT_VERSION] if train_on == "all" else [FORMAT_VERSION, train_on]
    key = json.dumps([*fmt, source, tokens])
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    base = root or Path(os.environ.get("FSDP_EKS_CACHE_DIR") or Path.home() / ".cache" / "trainer")
    suffix = np.dtype(token_dtype(tokenizer.n_vocab)).name
    return base / "tokens" / f"{digest}.{suffix}"


def _part(path: Path, index: int) -> Path:
    return path.with_name(f"{path.name}.part{index}")


def mask_file(path: Path) -> Path:
    return path.with_name(path.name + MASK_SUFFIX)


def write_part(
    path: Path, docs: list, tokenizer: Tokenizer, index: int, count: int, masked: bool = False
) -> None:
    """Tokenize slice `index` of `count` contiguous slices of `docs` into a part file,
    a batch of documents at a time (memory: one batch's ids, not the slice's); with
    `masked`, the loss mask into the mask file's part too."""
    start, stop = len(docs) * index // count, len(docs) * (index + 1) // count
    dtype = token_dtype(tokenizer.n_vocab)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _part(path, index).with_suffix(f".tmp{os.getpid()}")
    mask_tmp = _part(mask_file(path), index).with_suffix(f".tmp{os.getpid()}")
    with tmp.open("wb") as out, mask_tmp.open("wb") if masked else open(os.devnull, "wb") as mout:
        for first in range(start, stop, DOCS_PER_BATCH):
            batch = docs[first : min(first + DOCS_PER_BATCH, stop)]
            if not masked:
                for doc in tokenizer.encode_batch(batch):
                    np.asarray(doc, dtype=dtype).tofile(out)
                continue
            for ids, mask in encode_with_mask(batch, tokenizer):
                np.asarray(ids, dtype=dtype).tofile(out)
                np.asarray(mask, dtype=np.uint8).tofile(mout)
    if masked:
        mask_tmp.replace(_part(mask_file(path), index))
    tmp.replace(_part(path, index))


def join_parts(path: Path, count: int, masked: bool = False) -> None:
    """The token file (and, `masked`, its mask file) from the parts."""
    if masked:  # first: the token file's existence says the cache is complete
        _join(mask_file(path), count)
    _join(path, count)


def _join(path: Path, count: int) -> None:
    """Concatenate the part files in order into `path` (atomically), then drop them."""
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    with tmp.open("wb") as out:
        for index in range(count):
            with _part(path, index).open("rb") as part:
                while chunk := part.read(1 << 24):
                    out.write(chunk)
    tmp.replace(path)
    for index in range(count):
        _part(path, index).unlink(missing_ok=True)


def open_tokens(path: Path, dtype: type[np.unsignedinteger] | None = None) -> np.ndarray:
    """The memory map of `path`; its dtype is the suffix's unless given (the mask's)."""
    kind = np.dtype(path.suffix.lstrip(".")) if dtype is None else np.dtype(dtype)
    if path.stat().st_size == 0:
        return np.zeros(0, dtype=kind)
    return np.memmap(path, dtype=kind, mode="r")


def cached_tokens(
    path: Path,
    read_documents: Callable[[], list[str]],
    tokenizer: Tokenizer,
    local_rank: int,
    local_world_size: int,
    barrier: Callable[[], object],
    masked: bool = False,
) -> np.ndarray:
    """The token stream from `path`, built first if missing. Called on
    every rank (the barriers are collective); only the ranks of a host without the file
    do work. `masked` (--train_on assistant): documents may be data.Segments and a
    uint8 mask file is kept next to the token file (open_mask reads it)."""
    building = not path.exists()
    if building:
        write_part(path, read_documents(), tokenizer, local_rank, local_world_size, masked)
    barrier()
    if building and local_rank == 0:
        join_parts(path, local_world_size, masked)
    barrier()
    return open_tokens(path)


def open_mask(path: Path) -> np.ndarray:
    """The loss mask of token file `path` (built by cached_tokens(masked=True))."""
    return open_tokens(mask_file(path), np.uint8)
