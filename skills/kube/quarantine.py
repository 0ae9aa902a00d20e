"""Quarantine a node whose GPU failed a job: cordon it (spec.unschedulable) and taint it
`fsdp-eks.io/quarantined=<reason>:NoSchedule`, so neither the resubmitted job nor any
other lands there, and release it again.

The quarantine is recorded on the node itself (annotation `fsdp-eks.io/quarantine`: the
reason, the job, when, and whether the node was cordoned already), so a release from any
machine undoes exactly what the quarantine did and nothing else: a node an admin had
cordoned stays cordoned, a node this suite never quarantined is refused as not_ours.
Each write is one merge patch carrying the resourceVersion it was read at, so a change
made meanwhile (another taint) fails the write instead of being overwritten.
"""

from __future__ import annotations

import datetime
import json
import re
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, Field

from skills.kube.client import KubeJson
from skills.kube.gpu_nodes import INSTANCE_TYPE_LABELS
from skills.shared.errors import ErrorCode, ToolFailure

TAINT_KEY = "fsdp-eks.io/quarantined"
RECORD_ANNOTATION = "fsdp-eks.io/quarantine"
NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
MERGE = "application/merge-patch+json"
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]+")


class Quarantine(BaseModel):
    """One quarantined node, as its annotation records it."""

    node: str
    reason: str = Field(description="The finding that cost the node (e.g. gpu_hardware_fault).")
    job: str | None = Field(default=None, description="The job whose pods ran there.")
    since: str = Field(description="When it was quarantined (RFC 3339).")
    was_cordoned: bool = Field(
        default=False, description="Cordoned before the quarantine (a release keeps it so)."
    )
    nodegroup: str | None = None


def _path(node: str) -> str:
    return f"/api/v1/nodes/{node}"


def record_of(node: dict[str, Any]) -> Quarantine | None:
    """The node's quarantine record, or None (never quarantined by this suite, or a record
    that does not parse: then the node is not ours to release either)."""
    meta = node.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(RECORD_ANNOTATION)
    if not isinstance(raw, str):
        return None
    try:
        return Quarantine.model_validate(json.loads(raw))
    except ValueError:
        return None


def _taint_value(reason: str) -> str:
    """A taint's value is a label value: 63 characters of [A-Za-z0-9_.-], alphanumeric
    at both ends."""
    return _LABEL_VALUE.sub("-", reason)[:63].strip("-_.") or "fault"


def _read(kube: KubeJson, node: str) -> dict[str, Any]:
    found = kube.get_or_none(_path(node))
    if found is None:
        raise ToolFailure(
            ErrorCode.NOT_FOUND,
            f"No node named {node!r} in the cluster.",
            "Name a node as kubectl get nodes lists it.",
            {"node": node},
        )
    return found


def _patch(kube: KubeJson, node: dict[str, Any], patch: dict[str, Any]) -> None:
    version = (node.get("metadata") or {}).get("resourceVersion")
    if version:
        patch.setdefault("metadata", {})["resourceVersion"] = version
    kube.request("PATCH", _path(node["metadata"]["name"]), body=patch, content_type=MERGE)


def quarantine(kube: KubeJson, node: str, reason: str, job: str | None) -> Quarantine:
    """Cordon and taint `node` (idempotent: a node quarantined already keeps its record)."""
    current = _read(kube, node)
    known = record_of(current)
    if known is not None:
        return known
    spec = current.get("spec") or {}
    labels = (current.get("metadata") or {}).get("labels") or {}
    record = Quarantine(
        node=node,
        reason=reason,
        job=job,
        since=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        was_cordoned=bool(spec.get("unschedulable")),
        nodegroup=labels.get(NODEGROUP_LABEL),
    )
    taints = [t for t in spec.get("taints") or [] if t.get("key") != TAINT_KEY]
    taints.append({"key": TAINT_KEY, "value": _taint_value(reason), "effect": "NoSchedule"})
    _patch(kube, current, {
        "metadata": {"annotations": {RECORD_ANNOTATION: record.model_dump_json()}},
        "spec": {"unschedulable": True, "taints": taints},
    })  # fmt: skip
    return record


def release(kube: KubeJson, node: str) -> Quarantine:
    """Undo the quarantine of `node`: its taint and record go, and it is uncordoned unless
    it was cordoned before. A node without this suite's record is refused (not_ours)."""
    current = _read(kube, node)
    record = record_of(current)
    if record is None:
        raise ToolFailure(
            ErrorCode.NOT_OURS,
            f"Node {node!r} carries no fsdp-eks quarantine (annotation {RECORD_ANNOTATION}).",
            "Only nodes this suite quarantined are released here; list them with "
            "action=release_node and no node. Others: kubectl uncordon / kubectl taint.",
            {"node": node},
        )
    taints = [t for t in (current.get("spec") or {}).get("taints") or [] if
              t.get("key") != TAINT_KEY]  # fmt: skip
    _patch(kube, current, {
        "metadata": {"annotations": {RECORD_ANNOTATION: None}},
        "spec": {"unschedulable": True if record.was_cordoned else None, "taints": taints or None},
    })  # fmt: skip
    return record


def quarantined(nodes: Iterable[dict[str, Any]]) -> list[Quarantine]:
    """The records of the quarantined nodes among `nodes` (one LIST of nodes)."""
    return [r for n in nodes if (r := record_of(n)) is not None]


def schedulable(node: dict[str, Any], instance_type: str | None) -> bool:
    """A Ready node, not cordoned nor quarantined, of the instance type (when given)."""
    spec, status = node.get("spec") or {}, node.get("status") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    tainted = any(t.get("key") == TAINT_KEY for t in spec.get("taints") or [])
    kind = next((labels[k] for k in INSTANCE_TYPE_LABELS if k in labels), None)
    fits = instance_type is None or kind == instance_type
    return ready and fits and not spec.get("unschedulable") and not tainted


__all__ = [
    "NODEGROUP_LABEL",
    "RECORD_ANNOTATION",
    "TAINT_KEY",
    "Quarantine",
    "quarantine",
    "quarantined",
    "record_of",
    "release",
    "schedulable",
]
