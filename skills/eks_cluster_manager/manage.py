"""manage_eks_cluster's one call: the tool's arguments as one request, sent to the
action they name (actions, nccl_gate, create_config); the command module holds only
the signature."""

from __future__ import annotations

from dataclasses import dataclass

from skills.eks_cluster_manager import actions
from skills.eks_cluster_manager.checks import Options
from skills.eks_cluster_manager.cleanup import BucketPolicy, CleanupSpec, Part, needs_parts
from skills.eks_cluster_manager.create_config import ConfigRequest, create_config
from skills.eks_cluster_manager.models import ClusterReport
from skills.eks_cluster_manager.nccl_gate import NcclRequest, nccl_test
from skills.eks_cluster_manager.storage import DeploymentType, StorageSpec
from skills.kube.fields import ClusterAccess
from skills.shared.errors import needed
from skills.shared.progress import NullProgress, Progress


@dataclass(frozen=True)
class ClusterCall:
    """manage_eks_cluster's arguments (the command's signature gives each its default)."""

    action: str
    access: ClusterAccess
    options: Options
    auto_fix: bool
    confirm: bool
    nodegroup: str | None
    sizes: tuple[int | None, int | None, int | None]  # min, max, desired
    nodes: int
    instance_type: str | None
    image: str | None
    nccl_output: str | None
    volume_size: int
    capacity_reservation_id: str | None
    output: str | None
    fsx_size_gib: int
    fsx_deployment_type: DeploymentType
    fsx_throughput: int | None
    kubernetes_version: str
    bucket: str | None
    delete_bucket: BucketPolicy
    delete_cluster: bool
    only: list[Part] | None
    wait_seconds: float | None
    node: str | None = None  # release_node's


def manage(call: ClusterCall, progress: Progress | None = None) -> ClusterReport:
    progress = progress or NullProgress()
    access, action = call.access, call.action
    if call.auto_fix and action == "validate":
        action = "auto_fix"  # what it changes is a plan until confirm says apply
    if action == "describe":
        return actions.describe(access, progress)
    if action == "validate":
        return actions.validate(access, call.options, progress)
    if action == "auto_fix":
        return actions.auto_fix(access, call.options, call.confirm, progress)
    if action == "release_node":
        return actions.release_node(access, call.node, call.confirm)
    if action == "scale":
        return actions.scale(access, call.nodegroup, call.sizes, call.confirm)
    if action == "kubeconfig":
        return actions.kubeconfig(access, call.confirm)
    if action == "storage":
        return actions.storage(access, _storage(call), call.confirm, progress)
    if action == "cleanup":
        return actions.cleanup(access, _cleanup(call), call.confirm, progress)
    if action == "nccl_test":
        request = NcclRequest(call.options.namespace, call.nodes, call.instance_type,
                              call.image, call.nccl_output, call.wait_seconds)  # fmt: skip
        return nccl_test(access, request, progress)
    request = ConfigRequest(call.instance_type, call.nodes, call.volume_size,
                            call.capacity_reservation_id, call.output,
                            call.kubernetes_version)  # fmt: skip
    return create_config(access, request, call.confirm)


def inspect(
    action: str,
    access: ClusterAccess,
    options: Options,
    instance_type: str | None,
    nccl_output: str | None,
    progress: Progress | None = None,
) -> ClusterReport:
    """inspect_eks_cluster's one call: the actions that only read."""
    progress = progress or NullProgress()
    if action == "describe":
        return actions.describe(access, progress)
    if action == "validate":
        return actions.validate(access, options, progress)
    hint = ("Pass nccl_output (a saved all_reduce_perf output), or run the test on the "
            "cluster with manage_eks_cluster(action=nccl_test).")  # fmt: skip
    return actions.judge_nccl_output(
        needed(nccl_output, "nccl_test", "nccl_output", hint), instance_type
    )


def _storage(call: ClusterCall) -> StorageSpec:
    return StorageSpec(
        cluster=call.access.need_cluster("storage"),
        namespace=call.options.namespace,
        claim=call.options.checkpoint_pvc or StorageSpec.claim,
        size_gib=call.fsx_size_gib,
        deployment_type=call.fsx_deployment_type,
        bucket=call.bucket,
        nodegroup=call.nodegroup,
        throughput=call.fsx_throughput,
    )


def _cleanup(call: ClusterCall) -> CleanupSpec:
    return CleanupSpec(
        cluster=call.access.need_cluster("cleanup"),
        parts=needs_parts(list(call.only or [])),
        bucket=call.bucket,
        delete_bucket=call.delete_bucket,
        delete_cluster=call.delete_cluster,
    )
