"""Hugging Face Hub ids (`org/name`) for the model, tokenizer and dataset, inside the job.

    is_hub_id(source)         an `org/name` that is not a local path or an s3:// URI
    local_dir(source, ...)    a hub id's files on this node (downloaded once), else source

The download happens once per node: every local rank calls local_dir, the first to take a
file lock downloads (huggingface_hub, HF_TOKEN from the environment), the others wait on
the lock and then read the same directory without asking the hub again. The files land in
huggingface_hub's cache, HF_HOME: the deployers point it at the checkpoint or FSx volume
when the job has one (so a restarted pod or the next job finds them), else it is the
node's ~/.cache/huggingface. Tests reach a local stand-in of the hub through HF_ENDPOINT.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

from trainer import storage
from trainer.config import FILE_SUFFIXES, ConfigError

# The hub's own rule for repo ids (huggingface_hub's validate_repo_id), with the org.
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$")
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


def local_dir(source: str, patterns: tuple[str, ...] = MODEL_FILES, what: str = "model") -> str:
    """A hub id's files (those matching `patterns`) in a local directory, downloaded by
    the first process of the node and reused by the rest; any other source unchanged."""
    if not is_hub_id(source):
        return source
    root = _cache_root()
    key = hashlib.sha256("\0".join((source, *patterns)).encode()).hexdigest()[:16]
    name = f"fsdp-eks--{source.replace('/', '--')}--{key}"
    # The marker names the finished snapshot: a download that died half-way has none.
    marker = root / ".locks" / f"{name}.done"
    with _node_lock(root / ".locks" / f"{name}.lock"):
        if marker.is_file() and Path(done := marker.read_text(encoding="utf-8")).is_dir():
            return done
        path = _download(source, patterns, what)
        marker.write_text(path, encoding="utf-8")
        return path


def _download(source: str, patterns: tuple[str, ...], what: str) -> str:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        return snapshot_download(
            source,
            allow_patterns=list(patterns),
            cache_dir=_cache_root(),
            endpoint=os.environ.get("HF_ENDPOINT"),  # None: the public hub
            token=_token() or None,  # None: huggingface_hub's own lookup (a login's file)
        )
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
