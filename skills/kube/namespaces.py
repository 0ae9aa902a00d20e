"""Namespaces the suite creates when a job, a model server or the storage names one the
cluster lacks (the FSDP-on-EKS documents use `llm-training`): created, never applied over,
with the suite's label plus NAMESPACE_LABEL, so cleanup can tell the namespaces it made
from the user's; and deleted only when nothing in them is anyone else's (deleting a
namespace deletes everything inside it).

"default" and the cluster's own namespaces always exist: never asked for, never made."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from skills.kube.client import KubeJson
from skills.kube.objects import KINDS, kind_path
from skills.shared.ownership import labelled_ours, managed_labels

NAMESPACE_LABEL = "fsdp-eks/namespace"  # on the namespaces the suite created
ALWAYS_THERE = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
# What Kubernetes puts in every namespace itself: not a user's object.
BUILT_IN = frozenset({("ServiceAccount", "default"), ("ConfigMap", "kube-root-ca.crt")})
# The namespaced kinds a namespace's contents are read from (events pass with it).
CONTENT_KINDS = tuple(k for k, (_, _, namespaced) in KINDS.items() if namespaced and k != "Event")


def namespace_object(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": managed_labels(**{NAMESPACE_LABEL: "created"})},
    }


def missing(kube: KubeJson, name: str) -> bool:
    """Whether the cluster lacks namespace `name` (never true of ALWAYS_THERE)."""
    if name in ALWAYS_THERE:
        return False
    return kube.get_or_none(kind_path("Namespace", name=name)) is None


def ensure(kube: KubeJson, name: str) -> bool:
    """Create namespace `name` when missing (a create, never an apply: a namespace
    someone else made is not relabelled); True when this call created it. Another
    writer creating it first (409) is the same as finding it."""
    if not missing(kube, name):
        return False
    status, _ = kube.request(
        "POST", kind_path("Namespace"), body=namespace_object(name), missing_ok=(409,)
    )
    return status < 300


def plan_line(kube: KubeJson | None, name: str) -> str | None:
    """What a plan says about the namespace: None when it exists (or is always there);
    with no cluster to ask (kube None), that it is created if missing."""
    if name in ALWAYS_THERE:
        return None
    if kube is None:
        return f"namespace {name}: created (labelled {NAMESPACE_LABEL}) if the cluster lacks it"
    if missing(kube, name):
        return f"namespace {name}: created (labelled {NAMESPACE_LABEL}); the cluster lacks it"
    return None


def created_by_suite(namespace: dict[str, Any]) -> bool:
    return labelled_ours(namespace, NAMESPACE_LABEL)


@dataclass(frozen=True)
class Content:
    kind: str
    name: str


def foreign_contents(
    kube: KubeJson,
    name: str,
    going: set[tuple[str, str]] = frozenset(),  # type: ignore[assignment]
) -> list[Content]:
    """What namespace `name` holds that is someone else's: an object neither the suite's
    and deleted with it (`going`: (kind, name) the same run deletes) nor Kubernetes' own
    (BUILT_IN, or made by a controller: ownerReferences, e.g. a Deployment's pods)."""
    found = []
    for kind in CONTENT_KINDS:
        for obj in kube.items(kind_path(kind, name)):
            meta = obj.get("metadata") or {}
            object_name = str(meta.get("name", ""))
            if meta.get("namespace") not in (None, name):
                continue  # a server that ignored the namespace in the path
            if (kind, object_name) in BUILT_IN or meta.get("ownerReferences"):
                continue
            if (kind, object_name) in going:
                continue
            found.append(Content(kind, object_name))
    return found
