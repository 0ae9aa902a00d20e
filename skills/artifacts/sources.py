"""Where a fetch reads from: an s3:// prefix (every object under it), a PVC on the
cluster (`pvc:<claim>/<path>`, read by a short-lived pod: claim.py), or a folder on this
machine (a local job's runs/<job>/checkpoints or export). Each yields Entries."""

from __future__ import annotations

import os
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from skills.artifacts.local_files import Entry, safe_relpath
from skills.shared.errors import ErrorCode, ToolFailure

CLAIM = re.compile(r"^pvc:(?P<claim>[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?)(?P<path>/.*)?$")
S3 = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(?P<key>.*))?$")


@dataclass(frozen=True)
class Source:
    kind: Literal["s3", "claim", "local"]
    text: str
    bucket: str = ""
    key: str = ""  # s3: the prefix; claim: the path inside the claim ("" its root)
    claim: str = ""


def parse(source: str) -> Source:
    if m := S3.match(source):
        key = (m.group("key") or "").strip("/")
        if ".." in key.split("/"):
            raise _bad(source, "an s3:// prefix has no '..' part")
        return Source("s3", source, bucket=m.group("bucket"), key=key)
    if source.startswith("pvc:"):
        m = CLAIM.match(source)
        path = posixpath.normpath((m.group("path") or "/") if m else "/")
        if m is None or ".." in (m.group("path") or "").split("/"):
            raise _bad(source, "pvc:<claim>/<path inside the claim>, with no '..' part")
        return Source("claim", source, key=path.strip("/"), claim=m.group("claim"))
    return Source("local", source)


def _bad(source: str, why: str) -> ToolFailure:
    return ToolFailure(
        ErrorCode.INVALID_INPUT,
        f"source {source!r}: {why}.",
        "Give s3://bucket/prefix, pvc:<claim>/<path> (with the cluster's access) or a "
        "local folder.",
        {"problems": [{"field": "source", "problem": why}]},
    )


def s3_entries(s3: Any, source: Source) -> list[Entry]:
    """Every object under the prefix (as a folder: `prefix/`), or the one object the key
    names; paths relative to the prefix."""
    prefix = source.key + "/" if source.key else ""
    entries = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=source.bucket, Prefix=prefix):
        for obj in page.get("Contents") or []:
            key = obj["Key"]
            if key.endswith("/"):
                continue  # a console-made "folder" marker
            relpath = safe_relpath(key[len(prefix) :], source.text)
            entries.append(
                Entry(relpath, int(obj.get("Size") or 0), _s3_reader(s3, source.bucket, key))
            )
    if not entries and source.key:  # the key names one object
        head = _head_or_none(s3, source.bucket, source.key)
        if head is not None:
            name = posixpath.basename(source.key)
            entries.append(
                Entry(
                    name,
                    int(head.get("ContentLength") or 0),
                    _s3_reader(s3, source.bucket, source.key),
                )
            )
    if not entries:
        raise ToolFailure(
            ErrorCode.NOT_FOUND,
            f"Nothing under {source.text}.",
            "Check the bucket and prefix (a job's export is s3://<bucket>/<prefix>/export).",
            {"source": source.text},
        )
    return sorted(entries, key=lambda e: e.path)


def _s3_reader(s3: Any, bucket: str, key: str) -> Any:
    return lambda: s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def _head_or_none(s3: Any, bucket: str, key: str) -> dict[str, Any] | None:
    import botocore.exceptions

    try:
        return s3.head_object(Bucket=bucket, Key=key)
    except botocore.exceptions.ClientError as exc:
        if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
            return None
        raise


def local_entries(source: Source) -> list[Entry]:
    """The regular files of a local folder (or the one file named), links not followed."""
    root = Path(source.text).expanduser()
    if root.is_file() and not root.is_symlink():
        return [Entry(root.name, root.stat().st_size, root.read_bytes)]
    if not root.is_dir():
        raise ToolFailure(
            ErrorCode.NOT_FOUND,
            f"{source.text} is not a folder or file on this machine.",
            "Give the job's folder (runs/<job>/checkpoints, an export folder), s3://... or "
            "pvc:<claim>/<path>.",
            {"source": source.text},
        )
    entries = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder) / name
            if path.is_symlink() or not path.is_file():
                continue
            relpath = path.relative_to(root).as_posix()
            entries.append(Entry(relpath, path.stat().st_size, path.read_bytes))
    return entries
