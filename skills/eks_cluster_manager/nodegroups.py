"""EKS managed node groups: describe, and scale (min/max/desired) with the zero gate."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from skills.cloud.clients import aws_error_code
from skills.eks_cluster_manager.models import NodeGroupInfo
from skills.eks_cluster_manager.params import Nodegroup, within
from skills.shared.confirm import require_confirm
from skills.shared.errors import ErrorCode, ToolFailure


class ScaleSpec(BaseModel):
    """action=scale's parameters, each declared here once: manage_eks_cluster flattens
    this model into its inputs (schema, CLI flags, validation) and gathers them back."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodegroup: Nodegroup = None
    min_size: Annotated[int | None, Field(description="Node group min."), within(0, 1000)] = None
    max_size: Annotated[int | None, Field(description="Max."), within(0, 1000)] = None
    desired_size: Annotated[int | None, Field(description="Desired."), within(0, 1000)] = None


def _info(group: dict[str, Any]) -> NodeGroupInfo:
    scaling = group.get("scalingConfig") or {}
    return NodeGroupInfo(
        name=group["nodegroupName"],
        status=group.get("status"),
        instance_types=group.get("instanceTypes") or [],
        capacity_type=group.get("capacityType"),
        ami_type=group.get("amiType"),
        min_size=scaling.get("minSize"),
        max_size=scaling.get("maxSize"),
        desired_size=scaling.get("desiredSize"),
    )


def names(eks: Any, cluster: str) -> list[str]:
    found: list[str] = []
    for page in eks.get_paginator("list_nodegroups").paginate(clusterName=cluster):
        found += page.get("nodegroups", [])
    return sorted(found)


def describe_all(eks: Any, cluster: str) -> list[NodeGroupInfo]:
    return [
        _info(eks.describe_nodegroup(clusterName=cluster, nodegroupName=n)["nodegroup"])
        for n in names(eks, cluster)
    ]


def describe_one(eks: Any, cluster: str, nodegroup: str) -> NodeGroupInfo:
    import botocore.exceptions

    try:
        group = eks.describe_nodegroup(clusterName=cluster, nodegroupName=nodegroup)
    except botocore.exceptions.ClientError as exc:
        if aws_error_code(exc) != "ResourceNotFoundException":
            raise
        known = names(eks, cluster)
        raise ToolFailure(
            ErrorCode.NOT_FOUND,
            f"No node group {nodegroup!r} in cluster {cluster}; node groups: "
            f"{', '.join(known) or 'none'}.",
            "Pass one of the listed node groups (action=describe lists them).",
            {"nodegroup": nodegroup, "nodegroups": known},
        ) from None
    return _info(group["nodegroup"])


def _bad(problem: str, fields: list[str]) -> ToolFailure:
    return ToolFailure(
        ErrorCode.INVALID_INPUT,
        f"Invalid scaling: {problem}.",
        "EKS needs min_size <= desired_size <= max_size and max_size >= 1.",
        {"problems": [{"field": f, "problem": problem} for f in fields]},
    )


def target_sizes(
    current: NodeGroupInfo, min_size: int | None, max_size: int | None, desired: int | None
) -> tuple[int, int, int]:
    lo = current.min_size if min_size is None else min_size
    hi = current.max_size if max_size is None else max_size
    want = current.desired_size if desired is None else desired
    assert lo is not None and hi is not None and want is not None
    if hi < 1:
        raise _bad("max_size must be at least 1", ["max_size"])
    if lo > hi:
        raise _bad(f"min_size {lo} > max_size {hi}", ["min_size", "max_size"])
    if not lo <= want <= hi:
        raise _bad(f"desired_size {want} outside [{lo}, {hi}]", ["desired_size"])
    return lo, hi, want


def scale(
    eks: Any,
    cluster: str,
    nodegroup: str,
    min_size: int | None,
    max_size: int | None,
    desired: int | None,
    confirm: bool,
) -> tuple[NodeGroupInfo, dict[str, Any]]:
    """Update the scaling config; returns the group and the change (from -> to)."""
    if min_size is None and max_size is None and desired is None:
        raise _bad("give min_size, max_size or desired_size", ["desired_size"])
    current = describe_one(eks, cluster, nodegroup)
    lo, hi, want = target_sizes(current, min_size, max_size, desired)
    before = {
        "min_size": current.min_size,
        "max_size": current.max_size,
        "desired_size": current.desired_size,
    }
    after = {"min_size": lo, "max_size": hi, "desired_size": want}
    if want == 0 and (current.desired_size or 0) > 0:
        require_confirm(
            confirm,
            f"Scaling {nodegroup} to zero stops its {current.desired_size} node(s) and every "
            "pod on them.",
            "to scale to zero",
            {"nodegroup": nodegroup, "before": before, "after": after},
        )
    change = {"nodegroup": nodegroup, "before": before, "after": after}
    if before == after:
        change["update"] = None
        return current, change
    update = eks.update_nodegroup_config(
        clusterName=cluster,
        nodegroupName=nodegroup,
        scalingConfig={"minSize": lo, "maxSize": hi, "desiredSize": want},
    )["update"]
    change["update"] = {"id": update.get("id"), "status": update.get("status")}
    return describe_one(eks, cluster, nodegroup), change
