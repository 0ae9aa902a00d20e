"""action=scale, row by row against moto's EKS: scaling a group that has nodes to zero needs
confirm whatever its size (1 node too), a group already at zero or one that keeps nodes
does not, and the size bounds EKS accepts are accepted (equal bounds, desired at min)."""

from __future__ import annotations

import uuid

import boto3
import pytest

from commands.manage_eks_cluster import manage_eks_cluster
from skills.shared.errors import ToolFailure
from tests.integration.test_eks_access import REGION, make_cluster

pytestmark = pytest.mark.integration

# (group's (min, desired, max), the call's sizes, confirm) -> sizes after, or the error code
ROWS: dict[str, tuple[tuple[int, int, int], dict[str, int], bool, tuple[int, int, int] | str]] = {
    "one node to zero without confirm": ((0, 1, 2), {"desired_size": 0}, False,
                                         "confirmation_required"),
    "one node to zero with confirm": ((0, 1, 2), {"desired_size": 0}, True, (0, 0, 2)),
    "one node, min and desired to zero": ((1, 1, 2), {"min_size": 0, "desired_size": 0}, False,
                                          "confirmation_required"),
    "already at zero, raise max": ((0, 0, 2), {"max_size": 3}, False, (0, 0, 3)),
    "already at zero, desired zero again": ((0, 0, 2), {"desired_size": 0}, False, (0, 0, 2)),
    "lower min only, nodes stay": ((1, 1, 2), {"min_size": 0}, False, (0, 1, 2)),
    "equal bounds": ((0, 1, 2), {"min_size": 1, "max_size": 1}, False, (1, 1, 1)),
    "desired at min": ((1, 2, 3), {"desired_size": 1}, False, (1, 1, 3)),
    "desired at max": ((1, 2, 3), {"desired_size": 3}, False, (1, 3, 3)),
    "max zero": ((0, 0, 2), {"max_size": 0}, True, "invalid_input"),
    "desired below min": ((1, 2, 3), {"desired_size": 0}, True, "invalid_input"),
}  # fmt: skip


def sizes(eks, cluster: str) -> tuple[int, int, int]:
    scaling = eks.describe_nodegroup(clusterName=cluster, nodegroupName="gpu")["nodegroup"][
        "scalingConfig"
    ]
    return scaling["minSize"], scaling["desiredSize"], scaling["maxSize"]


@pytest.mark.parametrize("row", sorted(ROWS))
def test_scale_row(moto_server, row):
    (lo, want, hi), call, confirm, expected = ROWS[row]
    cluster = f"gate-{uuid.uuid4().hex[:8]}"
    make_cluster(cluster, {"gpu": ("p5.48xlarge", lo, want, hi)})
    eks = boto3.client("eks", region_name=REGION)

    def scale():
        return manage_eks_cluster(
            action="scale", cluster_name=cluster, region=REGION, nodegroup="gpu",
            confirm=confirm, **call,
        )  # fmt: skip

    if isinstance(expected, str):
        with pytest.raises(ToolFailure) as failure:
            scale()
        assert failure.value.code == expected
        assert sizes(eks, cluster) == (lo, want, hi)  # nothing changed
        return
    report = scale()
    assert sizes(eks, cluster) == expected
    after = report.changes["after"]
    assert (after["min_size"], after["desired_size"], after["max_size"]) == expected
