"""What the cluster has free for a job: GPUs per Ready node (counted as describe counts
them), submit's warning when the job's pods will not all fit, and the facts auto-retry's
remedies need (free GPUs, the newest image in the job's ECR repository)."""

from __future__ import annotations

from typing import Any

from skills.cloud.ecr_repository import latest_image
from skills.kube.gpu_nodes import NodeGpuFacts, gpus_requested_by_node, node_gpu_facts
from skills.shared.errors import ToolFailure
from skills.training_job_deployer.targets.kubernetes.kube_monitor import KubeReader
from skills.training_job_deployer.targets.kubernetes.plan import image_ecr_repository


def free_gpus(
    reader: KubeReader, nodes: list[NodeGpuFacts], instance_type: str | None
) -> dict[str, int]:
    """Free GPUs per Ready node (of the instance type, when given): allocatable less
    what the pods bound there and not ended request, counted as describe counts
    (gpus_requested_by_node: limits as requests where only limits are set)."""
    matching = {
        n.name: n.gpus_allocatable
        for n in nodes
        if n.ready and (instance_type is None or n.instance_type == instance_type)
    }
    if not matching:
        return {}
    used = gpus_requested_by_node(reader.all_pods())
    return {node: gpus - used.get(node, 0) for node, gpus in matching.items()}


def quota_warnings(
    pods: list[int], free_by_node: dict[str, int], instance_type: str | None
) -> list[str]:
    """The job's pods (the GPUs each asks) vs free GPUs on Ready nodes of the instance
    type (allocatable less what placed pods request), node by node, since a pod's GPUs
    are on one node: a warning only (the autoscaler may add nodes)."""
    asked, free = sum(pods), sum(max(f, 0) for f in free_by_node.values())
    each = max(pods, default=0)
    fit = sum(max(f, 0) // each for f in free_by_node.values()) if each else len(pods)
    where = instance_type or "GPU"
    if asked > free:
        return [
            f"{asked} GPUs asked, {free} free on Ready {where} nodes: pods stay "
            "Pending until the autoscaler adds nodes or GPUs free up"
        ]
    if fit < len(pods):
        return [
            f"{len(pods)} pod(s) of {each} GPUs asked; {free} GPUs are free on Ready "
            f"{where} nodes, but only {fit} such pod(s) fit on one node each: the rest "
            "stay Pending until the autoscaler adds nodes or GPUs free up"
        ]
    return []


def retry_facts(reader: KubeReader, settings: Any) -> dict[str, Any]:
    """What auto-retry's remedies need beyond the snapshot (remedies.Facts): free GPUs
    per Ready node of the instance type, and the newest image in the ECR repository
    (`repository`/ECR_REPOSITORY, or the one image_uri names). Unknown ones are left
    out."""
    instance_type = getattr(settings, "instance_type", None)
    nodes = [node_gpu_facts(n) for n in reader.nodes()]
    free = free_gpus(reader, nodes, instance_type)
    facts: dict[str, Any] = {"free_gpus": tuple(max(0, f) for f in free.values())}
    repository, region = image_ecr_repository(settings)
    if repository and region:
        try:
            newest = latest_image(repository, region)
        except ToolFailure:
            newest = None
        if newest:
            facts["newest_image"] = newest
    return facts
