"""Fetching from a PersistentVolumeClaim (FSx for Lustre: where a cluster job's
checkpoints and export live): a short-lived pod mounts the claim read-only, packs the
path (tar + gzip) and prints it base64 between two marker lines, the second with its
sha256; the tool reads the pod's log, checks size and digest, unpacks only regular files
with plain relative paths, and deletes the pod whatever happened.

Why the log and not `kubectl cp`: cp runs tar through the exec subresource, a websocket
stream this suite's raw-JSON client does not speak, and the log is one authenticated GET
any identity that may create the pod may read. The cost is a bound: a kubelet keeps a
container's log in files of 10 MiB (containerLogMaxSize), so the packed folder is
limited to LIMIT_BYTES; larger ones (a multi-GB checkpoint) are refused by the pod itself
with the way to move them instead (an s3:// checkpoint_dir or export, fetched from S3)."""

from __future__ import annotations

import base64
import hashlib
import io
import re
import secrets
import tarfile
import time
from collections.abc import Callable
from typing import Any

from skills.artifacts.local_files import Entry, safe_relpath
from skills.artifacts.sources import Source
from skills.kube.client import KubeJson
from skills.kube.efa import GPU_TOLERATIONS
from skills.kube.objects import kind_path
from skills.kube.pods import why_pod_waits
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.ownership import managed_labels
from skills.shared.progress import Progress
from skills.shared.secrets import redact

FETCH_IMAGE = "busybox:1.36.1"  # sh, tar -z, base64, sha256sum: all the pod runs
FETCH_LABEL = "fsdp-eks/fetch"
MOUNT, SCRATCH = "/claim", "/scratch"
# The packed folder: base64 makes it 4/3 larger, under the kubelet's 10 MiB log file.
LIMIT_BYTES = 7 * 1024 * 1024
TOO_LARGE_EXIT = 3
BEGIN, END = "FSDP-EKS-FETCH-BEGIN", "FSDP-EKS-FETCH-END"
# Fixed text: the path and the scratch folder come in as $1 and $2, never spliced in.
SCRIPT = (
    'set -e; if [ -d "$1" ]; then tar -C "$1" -czf "$2/a.tgz" .; '
    'else tar -C "$(dirname "$1")" -czf "$2/a.tgz" "$(basename "$1")"; fi; '
    'size=$(wc -c < "$2/a.tgz"); '
    f'if [ "$size" -gt {LIMIT_BYTES} ]; then echo "too large: $size bytes packed" >&2; '
    f"exit {TOO_LARGE_EXIT}; fi; "
    f'echo "{BEGIN} $size"; base64 "$2/a.tgz"; '
    f'echo "{END} $(sha256sum "$2/a.tgz" | cut -d " " -f 1)"'
)
TIMEOUT_S = 300.0
POLL_S = 2.0
_BASE64_LINE = re.compile(r"^[A-Za-z0-9+/=]+$")


def pod(source: Source, namespace: str, name: str | None = None) -> dict[str, Any]:
    """The fetch pod for `source` (a claim): read-only mount, never restarted, bounded."""
    name = name or f"fsdp-eks-fetch-{secrets.token_hex(4)}"
    inner = f"{MOUNT}/{source.key}" if source.key else MOUNT
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": managed_labels(**{FETCH_LABEL: source.claim}),
        },
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": int(TIMEOUT_S),
            "tolerations": [dict(t) for t in GPU_TOLERATIONS],  # a GPU-only cluster too
            "containers": [
                {
                    "name": "fetch",
                    "image": FETCH_IMAGE,
                    "command": ["sh", "-c", SCRIPT, "fetch", inner, SCRATCH],
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                    "volumeMounts": [
                        {"name": "claim", "mountPath": MOUNT, "readOnly": True},
                        {"name": "scratch", "mountPath": SCRATCH},
                    ],
                }
            ],
            "volumes": [
                {
                    "name": "claim",
                    "persistentVolumeClaim": {"claimName": source.claim, "readOnly": True},
                },
                {"name": "scratch", "emptyDir": {"sizeLimit": "16Mi"}},
            ],
        },
    }


def fetch(
    kube: KubeJson,
    source: Source,
    namespace: str,
    progress: Progress | None = None,
    sleep: Callable[[float], None] = time.sleep,
    timeout_s: float = TIMEOUT_S,
) -> list[Entry]:
    """Run the fetch pod, read what it printed, delete it; the folder's files."""
    if kube.get_or_none(kind_path("PersistentVolumeClaim", namespace, source.claim)) is None:
        raise ToolFailure(
            ErrorCode.NOT_FOUND,
            f"No PersistentVolumeClaim {source.claim!r} in namespace {namespace!r}.",
            "Name the claim the job mounted (checkpoint_volume=pvc:<claim>) and its namespace.",
            {"claim": source.claim, "namespace": namespace},
        )
    manifest = pod(source, namespace)
    name = manifest["metadata"]["name"]
    path = kind_path("Pod", namespace, name)
    kube.json("POST", kind_path("Pod", namespace), body=manifest)
    try:
        phase, found = _wait(kube, path, progress, sleep, timeout_s)
        status, log = kube.request("GET", path + "/log", missing_ok=(404,))
        text = log.decode("utf-8", "replace") if status < 300 else ""
    finally:
        kube.request("DELETE", path, missing_ok=(404,))
    if phase != "Succeeded":
        raise _failed(source, phase, found, text)
    return unpack(text, source)


def _wait(
    kube: KubeJson,
    path: str,
    progress: Progress | None,
    sleep: Callable[[float], None],
    timeout_s: float,
) -> tuple[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while True:
        found = kube.get_or_none(path) or {}
        phase = str((found.get("status") or {}).get("phase") or "Pending")
        if phase in ("Succeeded", "Failed"):
            return phase, found
        if time.monotonic() >= deadline:
            return f"still {phase} after {timeout_s:.0f} s", found
        if progress is not None:
            progress.report(0, None, why_pod_waits(found) or f"fetch pod {phase.lower()}")
        sleep(POLL_S)


def _exit_code(found: dict[str, Any]) -> int | None:
    for status in (found.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated") or {}
        if "exitCode" in terminated:
            return int(terminated["exitCode"])
    return None


def _failed(source: Source, phase: str, found: dict[str, Any], log: str) -> ToolFailure:
    if _exit_code(found) == TOO_LARGE_EXIT:
        return ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"{source.text} packs to more than {LIMIT_BYTES >> 20} MiB, more than a pod's "
            "log carries.",
            "Fetch a smaller path (the export's config and tokenizer, one checkpoint step), or "
            "write checkpoints/exports to s3:// (checkpoint_dir) and fetch from S3.",
            {"source": source.text, "limit_bytes": LIMIT_BYTES},
        )
    tail = redact("\n".join(log.splitlines()[-5:]))[-500:]
    waits = why_pod_waits(found)
    return ToolFailure(
        ErrorCode.SERVICE_ERROR,
        f"The fetch pod for {source.text} ended {phase}: {waits or tail or 'no log'}",
        "Check that the path exists in the claim and that a node can mount it (an EBS "
        "claim mounts on one node at a time).",
        {"source": source.text, "phase": phase},
    )


def unpack(log: str, source: Source) -> list[Entry]:
    """The files the pod printed, after checking its size and digest line."""
    lines = log.splitlines()
    begin = next((i for i, line in enumerate(lines) if line.startswith(BEGIN + " ")), None)
    end = next((i for i, line in enumerate(lines) if line.startswith(END + " ")), None)
    if begin is None or end is None or end < begin:
        raise _garbled(source, "no begin/end markers in the pod's log")
    packed = base64.b64decode(
        "".join(line for line in lines[begin + 1 : end] if _BASE64_LINE.match(line))
    )
    size, digest = lines[begin].split()[1], lines[end].split()[1]
    if str(len(packed)) != size or hashlib.sha256(packed).hexdigest() != digest:
        raise _garbled(source, "size or sha256 differs from what the pod packed (a cut log?)")
    entries = []
    with tarfile.open(fileobj=io.BytesIO(packed), mode="r:gz") as archive:
        for member in archive.getmembers():
            if not member.isfile():
                continue  # folders are made as needed; links and devices are not copied
            data = archive.extractfile(member)
            content = data.read() if data is not None else b""
            relpath = safe_relpath(member.name, source.text)
            entries.append(Entry(relpath, len(content), lambda c=content: c))
    return sorted(entries, key=lambda e: e.path)


def _garbled(source: Source, why: str) -> ToolFailure:
    return ToolFailure(
        ErrorCode.SERVICE_ERROR,
        f"The fetch pod's output for {source.text} is not whole: {why}.",
        "Fetch again; if it repeats, fetch a smaller path.",
        {"source": source.text},
    )
