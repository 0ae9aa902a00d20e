"""manage_eks_cluster's one call: the tool's arguments as one request, sent to the
action they name (actions, nccl_gate, create_config); the command module holds only
the signature. Each action's own parameters are declared once, on its spec (ScaleSpec,
NcclSpec, ConfigSpec, StorageSpec, CleanupSpec), which the tool flattens into its inputs."""

from __future__ import annotations

from dataclasses import dataclass

from skills.eks_cluster_manager import actions
from skills.eks_cluster_manager.checks import Options
from skills.eks_cluster_manager.cleanup import CleanupSpec
from skills.eks_cluster_manager.create_config import ConfigSpec, create_config
from skills.eks_cluster_manager.models import ClusterReport
from skills.eks_cluster_manager.nccl_gate import NcclSpec, nccl_test
from skills.eks_cluster_manager.nodegroups import ScaleSpec
from skills.eks_cluster_manager.storage import StorageSpec
from skills.kube.fields import ClusterAccess
from skills.shared.errors import needed
from skills.shared.progress import NullProgress, Progress


@dataclass(frozen=True)
class ClusterCall:
    """manage_eks_cluster's arguments: those every action reads, and each action's spec."""

    action: str
    access: ClusterAccess
    options: Options
    auto_fix: bool
    confirm: bool
    scale: ScaleSpec
    nccl: NcclSpec
    config: ConfigSpec
    storage: StorageSpec
    cleanup: CleanupSpec
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
        return actions.scale(access, call.scale, call.confirm)
    if action == "kubeconfig":
        return actions.kubeconfig(access, call.confirm)
    if action == "storage":
        storage = call.storage.placed(
            access.need_cluster("storage"), call.options.namespace, call.options.checkpoint_pvc
        )
        return actions.storage(access, storage, call.confirm, progress)
    if action == "cleanup":
        return actions.cleanup(access, call.cleanup, call.confirm, progress)
    if action == "nccl_test":
        return nccl_test(access, call.nccl, call.wait_seconds, progress)
    return create_config(access, call.config, call.confirm)


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
    hint = (
        "Pass nccl_output (a saved all_reduce_perf output), or run the test on the "
        "cluster with manage_eks_cluster(action=nccl_test)."
    )
    return actions.judge_nccl_output(
        needed(nccl_output, "nccl_test", "nccl_output", hint), instance_type
    )
