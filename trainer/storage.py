"""Local paths and s3:// URIs behind one small interface.

Datasets, tokenizers, HF checkpoints, training checkpoints and exports may each live
on a local disk (hostPath, PVC, FSx mount) or in S3. Everything else in the trainer
works on local paths: `fetch` brings an s3:// object or prefix to a local cache dir,
`upload_dir` pushes a finished local directory up. boto3 finds its endpoint and
credentials in the standard environment (AWS_ENDPOINT_URL, IRSA, instance profile).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

S3_SCHEME = "s3://"


def is_s3(uri: str | os.PathLike[str] | None) -> bool:
    return isinstance(uri, str) and uri.startswith(S3_SCHEME)


def split_s3(uri: str) -> tuple[str, str]:
    """'s3://bucket/a/b' -> ('bucket', 'a/b')."""
    if not is_s3(uri):
        raise ValueError(f"not an s3:// URI: {uri!r}")
    bucket, _, key = uri[len(S3_SCHEME) :].partition("/")
    if not bucket:
        raise ValueError(f"s3 URI without a bucket: {uri!r}")
    return bucket, key


def join(base: str, *parts: str) -> str:
    """Path join that keeps s3:// URIs intact."""
    if is_s3(base):
        return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])
    return str(Path(base, *parts))


def s3_client() -> Any:
    import boto3  # deferred: only runs that touch S3 pay for the import

    return boto3.client("s3")


def cache_dir_for(uri: str, root: str | os.PathLike[str] | None = None) -> Path:
    """A stable local directory for one remote URI (same URI -> same dir)."""
    base = Path(root or os.environ.get("FSDP_EKS_CACHE_DIR") or Path.home() / ".cache" / "trainer")
    digest = hashlib.sha256(uri.encode()).hexdigest()[:16]
    return base / digest


def list_s3(uri: str) -> list[str]:
    """Keys under an s3:// prefix, sorted."""
    bucket, prefix = split_s3(uri)
    client = s3_client()
    keys: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys.extend(obj["Key"] for obj in page.get("Contents", []))
    return sorted(keys)


def fetch(uri: str, cache_root: str | os.PathLike[str] | None = None) -> Path:
    """A local path holding `uri`'s content: the path itself when local; else the s3
    object (or every object under the prefix, keeping relative names) downloaded."""
    if not is_s3(uri):
        return Path(uri)
    bucket, key = split_s3(uri)
    client = s3_client()
    dest = cache_dir_for(uri, cache_root)
    keys = [k for k in list_s3(uri) if k == key or k.startswith(key.rstrip("/") + "/")]
    if not keys:
        raise FileNotFoundError(f"nothing at {uri}")
    if keys == [key]:  # a single object
        target = dest / Path(key).name
        target.parent.mkdir(parents=True, exist_ok=True)
        client.download_file(bucket, key, str(target))
        return target
    prefix = key.rstrip("/") + "/" if key else ""
    for k in keys:
        if k.endswith("/"):
            continue  # "directory" placeholder objects
        target = dest / k[len(prefix) :]
        target.parent.mkdir(parents=True, exist_ok=True)
        client.download_file(bucket, k, str(target))
    return dest


def upload_dir(
    local: str | os.PathLike[str],
    uri: str,
    last: tuple[str, ...] = (),
    only: tuple[str, ...] | None = None,
) -> None:
    """Upload files under `local` to the `uri` prefix. `only`: top-level names to
    include (default all); names in `last` go last (a completion marker must not
    appear before the data it vouches for)."""
    bucket, prefix = split_s3(uri)
    client = s3_client()
    root = Path(local)
    files = sorted(p for p in root.rglob("*") if p.is_file())
    if only is not None:
        files = [p for p in files if p.relative_to(root).parts[0] in only]
    files.sort(key=lambda p: p.name in last)  # stable: markers move to the end
    for path in files:
        key = "/".join(filter(None, [prefix.rstrip("/"), path.relative_to(root).as_posix()]))
        client.upload_file(str(path), bucket, key)


def delete_prefix(uri: str) -> None:
    bucket, _ = split_s3(uri)
    client = s3_client()
    keys = list_s3(uri.rstrip("/") + "/")
    for i in range(0, len(keys), 1000):
        client.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]]}
        )
