"""Quarantine a node whose GPU failed a job: cordon it (spec.unschedulable) and taint it
`fsdp-eks.io/quarantined=<reason>:NoSchedule`, so neither the resubmitted job nor any
other lands there, and release it again.

The quarantine is recorded on the node itself (annotation `fsdp-eks.io/quarantine`: the
node's uid, the reason, the job, when, and whether the node was cordoned already), so a
release from any machine undoes exactly what the quarantine did and nothing else. The
record is trusted only while it matches the node it is on (`why_not_held`): its uid (a
record copied onto another node is not ours), our taint, and the cordon. A quarantine
whose record an admin has since undone (uncordoned, untainted) is applied again, not
returned as it was. Whose the cordon is comes from the API server's own bookkeeping
(metadata.managedFields: the field manager that last set spec.unschedulable): a node an
admin cordoned, before the quarantine or after it, stays cordoned on release, and the
release says so; a node this suite never quarantined is refused as not_ours.
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
from skills.kube.objects import FIELD_MANAGER
from skills.shared.errors import ErrorCode, ToolFailure

TAINT_KEY = "fsdp-eks.io/quarantined"
RECORD_ANNOTATION = "fsdp-eks.io/quarantine"
NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"
MERGE = "application/merge-patch+json"
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]+")


class Quarantine(BaseModel):
    """One quarantined node, as its annotation records it."""

    node: str
    uid: str | None = Field(default=None, description="The node's uid: a copy elsewhere is void.")
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


def _uid(node: dict[str, Any]) -> str | None:
    return (node.get("metadata") or {}).get("uid")


def bound_record(node: dict[str, Any]) -> Quarantine | None:
    """The record, if it was written on this very node: its name and uid (a node object
    made again under the same name, as a replaced instance with the same IP is, has
    another). An annotation copied from another node is no quarantine of this suite's.
    A record of an older release has no uid: it counts while our taint is there too."""
    record = record_of(node)
    meta = node.get("metadata") or {}
    if record is None or record.node != meta.get("name"):
        return None
    if record.uid is None:
        return record if _our_taint(node) is not None else None
    return record if record.uid == _uid(node) else None


def _our_taint(node: dict[str, Any]) -> dict[str, Any] | None:
    return next(
        (t for t in (node.get("spec") or {}).get("taints") or [] if t.get("key") == TAINT_KEY), None
    )


def cordon_owner(node: dict[str, Any], record: Quarantine | None) -> str | None:
    """Who cordoned the node: None (it is not cordoned), FIELD_MANAGER (this suite's
    quarantine) or the other field manager that set spec.unschedulable last (an admin's
    kubectl). Where the API server keeps no managedFields, the record says: ours unless
    it was cordoned before."""
    if not (node.get("spec") or {}).get("unschedulable"):
        return None
    managed = (node.get("metadata") or {}).get("managedFields")
    if isinstance(managed, list) and managed:
        owners = [
            str(m.get("manager") or "")
            for m in managed
            if isinstance(m, dict)
            and "f:unschedulable" in (((m.get("fieldsV1") or {}).get("f:spec")) or {})
        ]
        if owners:
            return FIELD_MANAGER if FIELD_MANAGER in owners else owners[-1] or "unknown"
    if record is not None and not record.was_cordoned:
        return FIELD_MANAGER
    return "unknown"


def why_not_held(node: dict[str, Any]) -> str | None:
    """Why the node's quarantine record does not describe the node as it is (None: it
    does): no record of this node's, our taint gone, or the cordon lifted."""
    record = bound_record(node)
    if record is None:
        return "no fsdp-eks quarantine record of this node (a copied record does not count)"
    if _our_taint(node) is None:
        return f"its {TAINT_KEY} taint was removed"
    if not (node.get("spec") or {}).get("unschedulable"):
        return "it was uncordoned"
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
    kube.request(
        "PATCH",
        _path(node["metadata"]["name"]),
        body=patch,
        content_type=MERGE,
        query={"fieldManager": FIELD_MANAGER},  # whose the cordon is: cordon_owner
    )


def quarantine(kube: KubeJson, node: str, reason: str, job: str | None) -> Quarantine:
    """Cordon and taint `node`. Idempotent while the node is as its record says (cordoned,
    our taint, the record written on this node); otherwise (an admin lifted it since, or
    the record is a copy) the quarantine is applied again and recorded anew."""
    current = _read(kube, node)
    if why_not_held(current) is None:
        known = bound_record(current)
        assert known is not None  # held implies bound
        return known
    spec = current.get("spec") or {}
    labels = (current.get("metadata") or {}).get("labels") or {}
    owner = cordon_owner(current, bound_record(current))
    record = Quarantine(
        node=node,
        uid=_uid(current),
        reason=reason,
        job=job,
        since=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        was_cordoned=owner not in (None, FIELD_MANAGER),  # someone else's cordon stays
        nodegroup=labels.get(NODEGROUP_LABEL),
    )
    taints = [t for t in spec.get("taints") or [] if t.get("key") != TAINT_KEY]
    taints.append({"key": TAINT_KEY, "value": _taint_value(reason), "effect": "NoSchedule"})
    _patch(
        kube,
        current,
        {
            "metadata": {"annotations": {RECORD_ANNOTATION: record.model_dump_json()}},
            "spec": {"unschedulable": True, "taints": taints},
        },
    )
    return record


class Released(BaseModel):
    """What a release did: the record it undid, and what became of the cordon."""

    record: Quarantine
    cordon: str = Field(description="uncordoned, or why the cordon was kept.")


def release_plan(node: dict[str, Any]) -> tuple[Quarantine, str]:
    """The node's record (this node's own: a copy is refused as not_ours) and what a
    release would do with its cordon ('uncordoned', or why it is kept)."""
    name = (node.get("metadata") or {}).get("name")
    record = bound_record(node)
    if record is None:
        copied = record_of(node) is not None
        raise ToolFailure(
            ErrorCode.NOT_OURS,
            f"Node {name!r} carries no fsdp-eks quarantine of its own (annotation "
            f"{RECORD_ANNOTATION}"
            + (": the record there names another node or uid)." if copied else ")."),
            "Only nodes this suite quarantined are released here; list them with "
            "action=release_node and no node. Others: kubectl uncordon / kubectl taint.",
            {"node": name, "copied_record": copied},
        )
    owner = cordon_owner(node, record)
    if owner is None:
        return record, "not cordoned (someone uncordoned it already)"
    if owner == FIELD_MANAGER and not record.was_cordoned:
        return record, "uncordoned"
    if record.was_cordoned:
        return record, "kept: it was cordoned before the quarantine"
    return record, f"kept: {owner} cordoned it after the quarantine"


def release(kube: KubeJson, node: str) -> Released:
    """Undo the quarantine of `node`: its taint and record go, and it is uncordoned only
    if the cordon is still the one the quarantine made. A node without a record of its
    own is refused (not_ours)."""
    current = _read(kube, node)
    record, cordon = release_plan(current)
    taints = [
        t for t in (current.get("spec") or {}).get("taints") or [] if t.get("key") != TAINT_KEY
    ]
    patch: dict[str, Any] = {
        "metadata": {"annotations": {RECORD_ANNOTATION: None}},
        "spec": {"taints": taints or None},
    }
    if cordon == "uncordoned":
        patch["spec"]["unschedulable"] = None
    _patch(kube, current, patch)
    return Released(record=record, cordon=cordon)


def quarantined(nodes: Iterable[dict[str, Any]]) -> list[Quarantine]:
    """The records of the quarantined nodes among `nodes` (one LIST of nodes): each
    node's own (a record copied from another node is none)."""
    return [r for n in nodes if (r := bound_record(n)) is not None]


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
    "Released",
    "bound_record",
    "cordon_owner",
    "quarantine",
    "quarantined",
    "record_of",
    "release",
    "release_plan",
    "schedulable",
    "why_not_held",
]
