"""Failed nodes out of service for the Kubernetes target: each cordoned and tainted
(skills.kube.quarantine: recorded on the node, released by manage_eks_cluster
action=release_node), and the schedulable nodes left counted: too few for the job says
so, with the node group's scale call where it is known."""

from __future__ import annotations

from typing import Any

from skills.cloud.clients import aws_session
from skills.kube import quarantine as kq
from skills.training_job_deployer.targets.base import Quarantined
from skills.training_job_deployer.targets.kubernetes.kube_monitor import KubeReader


def quarantine_nodes(
    reader: KubeReader,
    settings: Any,
    nodes: list[str],
    reason: str,
    job_name: str,
    num_nodes: int,
) -> Quarantined:
    """Cordon and taint each node, and count the schedulable nodes of the settings'
    instance type left: too few for `num_nodes` says so, with the node group's scale
    call where the node group and the cluster are known."""
    records = [kq.quarantine(reader, n, reason, job_name) for n in nodes]
    instance_type = getattr(settings, "instance_type", None)
    left = sum(kq.schedulable(n, instance_type) for n in reader.nodes())
    if left >= num_nodes:
        return Quarantined(tuple(nodes))
    need = num_nodes - left
    where = instance_type or "GPU"
    short = (
        f"{left} schedulable {where} node(s) left for a job of {num_nodes} after "
        f"quarantining {', '.join(nodes)}: add {need} node(s), or replace the failed "
        "one (its node group's autoscaling group replaces a terminated instance), then "
        "deploy again"
    )
    group = next((r.nodegroup for r in records if r.nodegroup), None)
    cluster = getattr(settings, "cluster_name", None)
    if not (group and cluster):
        return Quarantined(tuple(nodes), short)
    sizes = nodegroup_sizes(settings.region, cluster, group)
    arguments: dict[str, Any] = {"action": "scale", "cluster_name": cluster, "nodegroup": group}
    if sizes is not None:
        low, high, desired = sizes
        arguments["desired_size"] = desired + need
        if desired + need > high:
            arguments["max_size"] = desired + need
    if settings.region:
        arguments["region"] = settings.region
    step = {
        "tool": "manage_eks_cluster",
        "arguments": arguments,
        "why": f"add {need} {where} node(s) to {group} (paid: ask first)",
    }
    return Quarantined(tuple(nodes), short, step)


def nodegroup_sizes(region: str | None, cluster: str, group: str) -> tuple[int, int, int] | None:
    """(min, max, desired) of the EKS node group; None when EKS cannot be asked."""
    try:
        eks = aws_session(None, region).client("eks")
        found = eks.describe_nodegroup(clusterName=cluster, nodegroupName=group)
        scaling = found["nodegroup"]["scalingConfig"]
        return scaling["minSize"], scaling["maxSize"], scaling["desiredSize"]
    except Exception:  # noqa: BLE001 (best effort: the call is shown without sizes)
        return None
