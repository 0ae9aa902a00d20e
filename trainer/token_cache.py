"""A dataset tokenized once into a memory-mapped token file, reused by every start.

The file holds the stream `tokenize_documents` would build (BOS + doc + EOS, in order)
as uint16 (vocabulary <= 65536) or uint32. Its name is a hash of the dataset (each
file's path, size and mtime, or the hub name), the tokenizer (its files' bytes) and
the format, so a change to any of them makes a new file. It lives on local disk under
$FSDP_EKS_CACHE_DIR (else ~/.cache/trainer)/tokens, one per host: the ranks of a host
each tokenize a contiguous slice of the documents (a part file), local rank 0 joins
the parts in order and renames the result into place. A start that finds the file
reads no documents at all; training windows are read from the memory map.

Two jobs on one host may want the same file at once, and a file may be damaged (cut
short, cut in half, replaced by a link): so the file starts with a header (magic,
format, item size, token count, SHA-256 of the tokens) that local rank 0 checks whole
before it is used, under an exclusive lock that one builder holds while it builds.
Each build's part and temporary files carry the build's own id, so nothing another
build wrote is ever read, joined or removed; a file that fails the check is rebuilt,
and the log names it and why.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from trainer import storage
from trainer.data import encode_with_mask
from trainer.safe_files import create_new, exclusive_lock, open_regular, read_regular, write_atomic
from trainer.tokenizer import Tokenizer

# 2: the header below (a version-1 file, headerless, is never looked at: another name).
FORMAT_VERSION = 2
MAGIC = b"FSDPTOK\0"
# magic, format, item size, token count, SHA-256 of the token bytes; padded to 64 bytes
# so the tokens after it stay aligned for any item size.
HEADER = struct.Struct("<8sIIQ32s")
HEADER_BYTES = 64
HASH_CHUNK = 1 << 24
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
        digest.update(read_regular(Path(file), "tokenizer file"))
    return [
        spec,
        type(tokenizer).__name__,
        tokenizer.n_vocab,
        tokenizer.bos_id,
        tokenizer.eos_id,
        digest.hexdigest(),
    ]


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


class TokenCacheError(RuntimeError):
    """A token file that cannot be used as it is; the message names it (a new attempt
    rebuilds it)."""


def _part(path: Path, build: str, index: int) -> Path:
    return path.with_name(f"{path.name}.part-{build}-{index}")


def _temp(path: Path, build: str) -> str:
    return f"{path.name}.tmp-{build}"


def mask_file(path: Path) -> Path:
    return path.with_name(path.name + MASK_SUFFIX)


def _itemsize(path: Path) -> int:
    """The item size a token file's name says (the mask file: uint8)."""
    if path.name.endswith(MASK_SUFFIX):
        return 1
    return np.dtype(path.suffix.lstrip(".")).itemsize


def write_part(
    path: Path,
    docs: list,
    tokenizer: Tokenizer,
    index: int,
    count: int,
    masked: bool = False,
    build: str = "solo",
) -> None:
    """Tokenize slice `index` of `count` contiguous slices of `docs` into build
    `build`'s part file, a batch of documents at a time (memory: one batch's ids, not
    the slice's); with `masked`, the loss mask into the mask file's part too."""
    start, stop = len(docs) * index // count, len(docs) * (index + 1) // count
    dtype = token_dtype(tokenizer.n_vocab)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _part(path, build, index).with_name(_temp(_part(path, build, index), build))
    mask_tmp = _part(mask_file(path), build, index)
    mask_tmp = mask_tmp.with_name(_temp(mask_tmp, build))
    with create_new(tmp) as out, create_new(mask_tmp) if masked else open(os.devnull, "wb") as mout:
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
        os.replace(mask_tmp, _part(mask_file(path), build, index))
    os.replace(tmp, _part(path, build, index))


def join_parts(path: Path, count: int, masked: bool = False, build: str = "solo") -> None:
    """The token file (and, `masked`, its mask file) from build `build`'s parts."""
    if masked:  # first: the token file's existence says the cache is complete
        _join(mask_file(path), count, build)
    _join(path, count, build)


def _join(path: Path, count: int, build: str) -> None:
    """The header, then the part files in order, into a file of this build's own, renamed
    over `path` once whole; then the parts are dropped."""
    tmp = path.with_name(_temp(path, build))
    digest, size = hashlib.sha256(), 0
    try:
        with create_new(tmp) as out:
            out.write(bytes(HEADER_BYTES))  # written for real once the hash is known
            for index in range(count):
                with open_regular(
                    _part(path, build, index), "token part", follow_links=False
                ) as part:
                    while chunk := part.read(HASH_CHUNK):
                        out.write(chunk)
                        digest.update(chunk)
                        size += len(chunk)
            itemsize = _itemsize(path)
            out.seek(0)
            out.write(
                HEADER.pack(MAGIC, FORMAT_VERSION, itemsize, size // itemsize, digest.digest())
            )
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        for index in range(count):
            _part(path, build, index).unlink(missing_ok=True)


def _header(path: Path, handle, size: int) -> tuple[int, bytes]:  # noqa: ANN001
    """(token count, SHA-256) from an open token file's header; TokenCacheError when the
    header or the file's size says it is not a whole token file of this format."""
    itemsize = _itemsize(path)
    raw = handle.read(HEADER_BYTES)
    if len(raw) < HEADER_BYTES:
        raise TokenCacheError(f"token cache {path} is cut short ({size} bytes, no header)")
    magic, version, stored_itemsize, count, digest = HEADER.unpack_from(raw)
    if magic != MAGIC or version != FORMAT_VERSION or stored_itemsize != itemsize:
        raise TokenCacheError(
            f"token cache {path} has no valid header (not written by this trainer)"
        )
    if size != HEADER_BYTES + count * itemsize:
        raise TokenCacheError(
            f"token cache {path} holds {size - HEADER_BYTES} token bytes, its header says "
            f"{count * itemsize} ({count} tokens): it was cut or extended"
        )
    return count, digest


def check_file(path: Path) -> str | None:
    """Why the token (or mask) file at `path` cannot be used, or None when it is whole:
    a regular file (not a link), its header right, its size and the SHA-256 of its
    tokens what the header says."""
    try:
        with open_regular(path, "token cache", follow_links=False) as handle:
            size = os.fstat(handle.fileno()).st_size
            count, expected = _header(path, handle, size)
            digest = hashlib.sha256()
            while chunk := handle.read(HASH_CHUNK):
                digest.update(chunk)
    except FileNotFoundError:
        return "is missing"
    except (OSError, ValueError, TokenCacheError) as exc:
        return str(exc)
    if digest.digest() != expected:
        return f"token cache {path}: its {count} tokens do not match their recorded SHA-256"
    return None


def open_tokens(path: Path, dtype: type[np.unsignedinteger] | None = None) -> np.ndarray:
    """The memory map of the tokens in `path` (after its header); its dtype is the
    suffix's unless given (the mask's). The header and the size are checked here (the
    hash by check_file, once per build or start, on local rank 0); TokenCacheError
    names the file when they are wrong."""
    kind = np.dtype(path.suffix.lstrip(".")) if dtype is None else np.dtype(dtype)
    try:
        with open_regular(path, "token cache", follow_links=False) as handle:
            count, _ = _header(path, handle, os.fstat(handle.fileno()).st_size)
    except (OSError, ValueError) as exc:
        raise TokenCacheError(f"token cache {path} cannot be opened: {exc}") from exc
    if count == 0:
        return np.zeros(0, dtype=kind)
    return np.memmap(path, dtype=kind, mode="r", offset=HEADER_BYTES, shape=(count,))


def _needs_build(path: Path, masked: bool) -> str | None:
    """A new build's id when the cache must be (re)built, else None. Local rank 0 only,
    under the lock: the files are checked whole; a damaged one is named in the log and
    what other builds left behind is swept."""
    files = [path, mask_file(path)] if masked else [path]
    problems = [(f, problem) for f in files if (problem := check_file(f))]
    if not problems:
        return None
    for _, problem in problems:
        if problem != "is missing":
            print(f"{problem}; rebuilding it from the dataset", file=sys.stderr, flush=True)
    for file in files:  # no other build of this cache runs while we hold the lock
        for stale in (
            *file.parent.glob(f"{file.name}.part-*"),
            *file.parent.glob(f"{file.name}.tmp-*"),
        ):
            stale.unlink(missing_ok=True)
    return uuid.uuid4().hex


def cached_tokens(
    path: Path,
    read_documents: Callable[[], list[str]],
    tokenizer: Tokenizer,
    local_rank: int,
    local_world_size: int,
    barrier: Callable[[], object],
    masked: bool = False,
) -> np.ndarray:
    """The token stream from `path`, built first if missing or damaged. Called on every
    rank (the three barriers are collective); only the ranks of a host that must build
    do work. Local rank 0 takes the cache's lock (another job building the same file
    is waited for, then its file is used), checks the file and writes its decision (a
    build id, or none) to `<file>.plan`, which the other local ranks read after the
    first barrier; it holds the lock until the parts are joined. `masked` (--train_on
    assistant): documents may be data.Segments and a uint8 mask file is kept next to
    the token file (open_mask reads it)."""
    plan = path.with_name(path.name + ".plan")
    path.parent.mkdir(parents=True, exist_ok=True)
    with exclusive_lock(path.with_name(path.name + ".lock")) if local_rank == 0 else _nothing():
        build: str | None = None
        if local_rank == 0:
            build = _needs_build(path, masked)
            write_atomic(
                plan, json.dumps({"build": build}).encode(), f"{plan.name}.tmp-{os.getpid()}"
            )
        barrier()
        if local_rank != 0:
            build = json.loads(read_regular(plan, "token cache plan"))["build"]
        if build is not None:
            write_part(
                path, read_documents(), tokenizer, local_rank, local_world_size, masked, build
            )
        barrier()
        if build is not None and local_rank == 0:
            join_parts(path, local_world_size, masked, build)
    barrier()
    return open_tokens(path)


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def open_mask(path: Path) -> np.ndarray:
    """The loss mask of token file `path` (built by cached_tokens(masked=True))."""
    return open_tokens(mask_file(path), np.uint8)
