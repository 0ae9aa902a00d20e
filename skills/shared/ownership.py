"""Touch only what is ours: how this suite marks what it creates, and the one check it
runs before it deletes, scales or applies over anything (Kubernetes objects and AWS
resources alike); anything without the marks is refused as `not_ours`.

The marks:
- AWS resources carry the tag `created-by: fsdp-eks` (the eksctl config puts it on the
  cluster and its node groups; storage on the file system, its security group and the
  bucket) plus `fsdp-eks/cluster: <name>`: a resource of this suite's for another
  cluster is not this cluster's to touch.
- Kubernetes objects carry the label `app.kubernetes.io/managed-by: fsdp-eks`, plus the
  label of their part (a model server's `fsdp-eks/model-server: <name>`, the storage
  objects' `fsdp-eks/storage`), and live in the namespace the caller named.

The readers (`why_not_ours_*`) say why in a few words (None: ours); `require_*` raise
the typed refusal, which names the object, what is missing and what to do instead."""

from __future__ import annotations

from typing import Any

from skills.shared.errors import ErrorCode, ToolFailure

CREATED_BY_TAG = ("created-by", "fsdp-eks")  # as eksctl.cluster_config spells it
CLUSTER_TAG = "fsdp-eks/cluster"
MANAGED_BY_LABEL = ("app.kubernetes.io/managed-by", "fsdp-eks")  # the suite's label, here only
MANAGED_SELECTOR = "=".join(MANAGED_BY_LABEL)  # a labelSelector for it
MODEL_SERVER_LABEL = "fsdp-eks/model-server"
STORAGE_LABEL = "fsdp-eks/storage"

Tags = list[dict[str, Any]] | dict[str, str] | None


# -- AWS tags -----------------------------------------------------------------------------


def aws_tags(cluster: str, name: str) -> dict[str, str]:
    return {"Name": name, CREATED_BY_TAG[0]: CREATED_BY_TAG[1], CLUSTER_TAG: cluster}


def tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def tag_dict(tags: Any) -> dict[str, str]:
    """Tags as a dict, from either AWS spelling (a list of Key/Value, or a map); anything
    else (a stand-in's or a hostile answer's) is no tags."""
    if isinstance(tags, dict):
        return {str(k): v for k, v in tags.items() if isinstance(v, str)}
    if not isinstance(tags, list):
        return {}
    found = {}
    for tag in tags:
        if isinstance(tag, dict) and isinstance(tag.get("Value"), str):
            found[str(tag.get("Key", ""))] = tag["Value"]
    return found


def made_by_suite(tags: Tags) -> bool:
    return tag_dict(tags).get(CREATED_BY_TAG[0]) == CREATED_BY_TAG[1]


def why_not_ours_aws(tags: Tags, cluster: str | None) -> str | None:
    """Why a resource with these tags is not this suite's for `cluster` (None: it is;
    `cluster` None: made by the suite is enough, for what has no cluster tag, e.g. the
    cluster itself or its eksctl node groups)."""
    found = tag_dict(tags)
    if found.get(CREATED_BY_TAG[0]) != CREATED_BY_TAG[1]:
        return "not created by fsdp-eks (no created-by tag)"
    if cluster is not None and found.get(CLUSTER_TAG) != cluster:
        other = found.get(CLUSTER_TAG)
        return f"fsdp-eks made it for cluster {other!r}" if other else "it has no cluster tag"
    return None


def ours(tags: Tags, cluster: str) -> bool:
    """Made by this suite for this cluster."""
    return why_not_ours_aws(tags, cluster) is None


# -- Kubernetes labels ----------------------------------------------------------------------


def managed_labels(**extra: str) -> dict[str, str]:
    return {MANAGED_BY_LABEL[0]: MANAGED_BY_LABEL[1], **extra}


def _labels(obj: Any) -> dict[str, Any]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels if isinstance(labels, dict) else {}


def why_not_ours_kube(
    obj: Any, label: str | None = None, value: str | None = None, namespace: str | None = None
) -> str | None:
    """Why a Kubernetes object is not this suite's (None: it is): the suite's label, and
    with `label` that label too (with `value`, that value), and with `namespace`, in it."""
    labels = _labels(obj)
    if labels.get(MANAGED_BY_LABEL[0]) != MANAGED_BY_LABEL[1]:
        return f"no {MANAGED_BY_LABEL[0]}={MANAGED_BY_LABEL[1]} label"
    if label is not None and label not in labels:
        return f"no {label} label"
    if label is not None and value is not None and labels.get(label) != value:
        return f"its {label} label is {labels.get(label)!r}, not {value!r}"
    meta = obj.get("metadata") or {}
    found = meta.get("namespace") if isinstance(meta, dict) else None
    if namespace is not None and found is not None and found != namespace:
        return f"it is in namespace {found!r}, not {namespace!r}"
    return None


def labelled_ours(obj: dict[str, Any], label: str | None = None) -> bool:
    """A Kubernetes object this suite made (and, with `label`, one that carries it)."""
    return why_not_ours_kube(obj, label) is None


# -- the refusal ----------------------------------------------------------------------------


def not_ours(kind: str, name: str, why: str, hint: str) -> ToolFailure:
    """The typed refusal: `kind` `name` exists and is not this suite's (`why`)."""
    return ToolFailure(
        ErrorCode.NOT_OURS,
        f"{kind} {name} exists and is not this suite's ({why}): it was left untouched.",
        hint,
        {"kind": kind, "name": name, "why": why},
    )


def require_kube_ours(
    obj: dict[str, Any] | None,
    kind: str,
    name: str,
    hint: str,
    *,
    label: str | None = None,
    value: str | None = None,
    namespace: str | None = None,
) -> None:
    """Raise `not_ours` unless `obj` (None: no such object, nothing to refuse) is this
    suite's; the one check before a delete, a scale or an apply over an object."""
    if obj is None:
        return
    if why := why_not_ours_kube(obj, label, value, namespace):
        raise not_ours(kind, name, why, hint)


def require_aws_ours(tags: Tags, kind: str, name: str, cluster: str | None, hint: str) -> None:
    """Raise `not_ours` unless an AWS resource with these tags is this suite's for `cluster`."""
    if why := why_not_ours_aws(tags, cluster):
        raise not_ours(kind, name, why, hint)


__all__ = [
    "CLUSTER_TAG",
    "CREATED_BY_TAG",
    "MANAGED_BY_LABEL",
    "MANAGED_SELECTOR",
    "MODEL_SERVER_LABEL",
    "STORAGE_LABEL",
    "aws_tags",
    "labelled_ours",
    "made_by_suite",
    "managed_labels",
    "not_ours",
    "ours",
    "require_aws_ours",
    "require_kube_ours",
    "tag_dict",
    "tag_list",
    "why_not_ours_aws",
    "why_not_ours_kube",
]
