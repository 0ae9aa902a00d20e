"""How this suite marks what it creates, so cleanup touches only its own: AWS resources
carry the tag `created-by: fsdp-eks` (the eksctl config puts it on the cluster and its
node groups; storage on the file system, its security group and the bucket) plus
`fsdp-eks/cluster: <name>`; Kubernetes objects carry the label
`app.kubernetes.io/managed-by: fsdp-eks` (a model server's also `fsdp-eks/model-server`,
the storage objects also `fsdp-eks/storage`)."""

from __future__ import annotations

from typing import Any

CREATED_BY_TAG = ("created-by", "fsdp-eks")  # as eksctl.cluster_config spells it
CLUSTER_TAG = "fsdp-eks/cluster"
# The suite's Kubernetes labels (skills/model_server/base.py spells the same; feature
# skills do not import each other).
MANAGED_BY_LABEL = ("app.kubernetes.io/managed-by", "fsdp-eks")
MODEL_SERVER_LABEL = "fsdp-eks/model-server"
STORAGE_LABEL = "fsdp-eks/storage"


def aws_tags(cluster: str, name: str) -> dict[str, str]:
    return {"Name": name, CREATED_BY_TAG[0]: CREATED_BY_TAG[1], CLUSTER_TAG: cluster}


def tag_list(tags: dict[str, str]) -> list[dict[str, str]]:
    return [{"Key": k, "Value": v} for k, v in tags.items()]


def tag_dict(tags: list[dict[str, Any]] | dict[str, str] | None) -> dict[str, str]:
    """Tags as a dict, from either AWS spelling (a list of Key/Value, or a map)."""
    if isinstance(tags, dict):
        return dict(tags)
    return {t.get("Key", ""): t.get("Value", "") for t in tags or ()}


def made_by_suite(tags: list[dict[str, Any]] | dict[str, str] | None) -> bool:
    return tag_dict(tags).get(CREATED_BY_TAG[0]) == CREATED_BY_TAG[1]


def ours(tags: list[dict[str, Any]] | dict[str, str] | None, cluster: str) -> bool:
    """Made by this suite for this cluster."""
    found = tag_dict(tags)
    return made_by_suite(found) and found.get(CLUSTER_TAG) == cluster


def managed_labels(**extra: str) -> dict[str, str]:
    return {MANAGED_BY_LABEL[0]: MANAGED_BY_LABEL[1], **extra}


def labelled_ours(obj: dict[str, Any], label: str | None = None) -> bool:
    """A Kubernetes object this suite made (and, with `label`, one that carries it)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if labels.get(MANAGED_BY_LABEL[0]) != MANAGED_BY_LABEL[1]:
        return False
    return label is None or label in labels
