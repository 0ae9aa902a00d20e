"""Hugging Face Hub ids (`org/name`) for the model, tokenizer and dataset, inside the job.

    is_hub_id(source)         an `org/name` that is not a local path or an s3:// URI
    local_dir(source, ...)    a hub id's files on this node (downloaded once), else source

The download happens once per node: every local rank calls local_dir, the first to take a
file lock downloads (huggingface_hub, HF_TOKEN from the environment), the others wait on
the lock and then read the same directory without asking the hub again. A marker records
the download (the revision asked for, the commit it resolved to, the files); it is trusted
only while its files are all there (a cache whose blobs were removed leaves dangling
links) and the revision still resolves to its commit: one metadata request, none for a
pinned commit, none offline (HF_HUB_OFFLINE) or while the hub cannot be reached, none for
a rank that waited on the lock while another checked. The files land in
huggingface_hub's cache, HF_HOME: the deployers point it at the checkpoint or FSx volume
when the job has one (so a restarted pod or the next job finds them), else it is the
node's ~/.cache/huggingface. Tests reach a local stand-in of the hub through HF_ENDPOINT.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainer import storage
from trainer.config import FILE_SUFFIXES, ConfigError

# The hub's own rule for repo ids (huggingface_hub's validate_repo_id), with the org.
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")  # a pinned revision: what it names never changes
# What a training job needs of a model repo: never its .bin/.pt/.gguf duplicates.
MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
TOKEN_HINT = (
    "set HF_TOKEN to a token of an account that accepted the model's licence on its hub "
    "page (Kubernetes: the deployer puts it in the job's Secret; local and Slurm: the "
    "environment you deploy from)"
)


def is_hub_id(source: str | None) -> bool:
    """`org/name` that is neither an existing local path nor an s3:// URI."""
    if not source or storage.is_s3(source) or not HUB_ID.match(source):
        return False
    if source.endswith(FILE_SUFFIXES):  # data/train.jsonl is a missing file, not a repo
        return False
    return not Path(source).expanduser().exists()


def _cache_root() -> Path:
    """huggingface_hub's cache dir, from the environment as it is now (the library reads
    it once, at import): HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub."""
    if cache := os.environ.get("HF_HUB_CACHE"):
        return Path(cache)
    home = os.environ.get("HF_HOME") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "huggingface"
    )
    return Path(home, "hub")


@contextlib.contextmanager
def _node_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (flock): one process per node (per volume, where the
    file system shares locks) runs the body at a time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def local_dir(
    source: str,
    patterns: tuple[str, ...] = MODEL_FILES,
    what: str = "model",
    revision: str = "main",
) -> str:
    """A hub id's files (those matching `patterns`, at `revision`) in a local directory,
    downloaded by the first process of the node and reused by the rest while the hub's
    revision is the one downloaded; any other source unchanged."""
    if not is_hub_id(source):
        return source
    root = _cache_root()
    key = hashlib.sha256("\0".join((source, *patterns, revision)).encode()).hexdigest()[:16]
    name = f"fsdp-eks--{source.replace('/', '--')}--{key}"
    # The marker names the finished snapshot: a download that died half-way has none.
    marker = root / ".locks" / f"{name}.done"
    asked = time.time()
    with _node_lock(root / ".locks" / f"{name}.lock"):
        record = _read_marker(marker)
        if record is not None and _intact(record):
            if record.get("checked", 0) >= asked:  # by the rank we waited on: same answer
                return str(record["path"])
            if _current(source, revision, record, what):
                _write_marker(marker, {**record, "checked": time.time()})
                return str(record["path"])
        path = _download(source, patterns, what, revision)
        snapshot = Path(path)
        _write_marker(
            marker,
            {
                "revision": revision,
                "commit": snapshot.name,
                "path": path,
                "checked": time.time(),
                "files": sorted(
                    str(f.relative_to(snapshot)) for f in snapshot.rglob("*") if f.is_file()
                ),
            },
        )
        return path


def _read_marker(marker: Path) -> dict[str, Any] | None:
    """The marker's record; None for none, or one of an older form (a bare path: it named
    no commit, so it is downloaded again, which the cache makes a few metadata requests)."""
    try:
        record = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    ok = isinstance(record, dict) and {"commit", "path", "files"} <= record.keys()
    return record if ok else None


def _write_marker(marker: Path, record: dict[str, Any]) -> None:
    tmp = marker.with_name(f"{marker.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record), encoding="utf-8")
    tmp.replace(marker)  # whole or not at all: a reader never sees half a record


def _intact(record: dict[str, Any]) -> bool:
    """Every file the download left is still there and readable (a link into a removed
    blob is not a file)."""
    snapshot = Path(str(record["path"]))
    files = record["files"]
    return bool(files) and all((snapshot / str(f)).is_file() for f in files)


def _offline() -> bool:
    # As huggingface_hub reads it, but now (the library reads it once, at import).
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")


def _current(source: str, revision: str, record: dict[str, Any], what: str) -> bool:
    """Whether the hub's `revision` is still the commit downloaded: one metadata request;
    yes without one for a pinned commit, offline, or when the hub cannot be reached
    (the intact files are what there is)."""
    if COMMIT.match(revision):
        return revision == record["commit"]
    if _offline():
        return True
    from huggingface_hub import HfApi

    try:
        with _hub_errors(source, what):
            info = HfApi(endpoint=os.environ.get("HF_ENDPOINT"), token=_token() or None)
            return info.repo_info(source, revision=revision).sha == record["commit"]
    except ConfigError:
        raise  # gone, gated or refused: as a download would say
    except Exception:  # noqa: BLE001 (unreachable, 5xx, throttled: use what is here)
        return True


def _download(source: str, patterns: tuple[str, ...], what: str, revision: str) -> str:
    from huggingface_hub import snapshot_download

    with _hub_errors(source, what):
        return snapshot_download(
            source,
            revision=revision,
            allow_patterns=list(patterns),
            cache_dir=_cache_root(),
            endpoint=os.environ.get("HF_ENDPOINT"),  # None: the public hub
            token=_token() or None,  # None: huggingface_hub's own lookup (a login's file)
        )


@contextlib.contextmanager
def _hub_errors(source: str, what: str) -> Iterator[None]:
    """The hub's refusals as ConfigErrors that say what to do; anything else as it is."""
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        yield
    except GatedRepoError as exc:  # before RepositoryNotFoundError: it is one
        # The hub's message never holds the token: only the repo and the URL.
        given = "the HF_TOKEN given has no access" if _token() else "no HF_TOKEN is set"
        raise ConfigError(
            f"{what} {source!r} is a gated hub repo and {given}; {TOKEN_HINT}"
        ) from exc
    except (RepositoryNotFoundError, RevisionNotFoundError) as exc:
        raise ConfigError(
            f"{what} {source!r} is not a local path, an s3:// URI or a hub repo this token "
            f"can see ({type(exc).__name__}); check the name, or set HF_TOKEN for a private repo"
        ) from exc
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status in (401, 403):
            raise ConfigError(
                f"{what} {source!r}: the hub refused access ({status}); {TOKEN_HINT}"
            ) from exc
        raise  # 5xx, throttling: retryable, as any other failure


def _token() -> str | None:
    return os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
