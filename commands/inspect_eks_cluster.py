"""inspect_eks_cluster: the cluster tool's reads (describe, validate, judge a saved NCCL
output), served by a --read-only server too. The writes are manage_eks_cluster's."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Annotated, Literal

from pydantic import Field

from commands import _eks_params as p
from commands._cli import main_for
from skills.eks_cluster_manager.checks import Options
from skills.eks_cluster_manager.manage import inspect
from skills.eks_cluster_manager.models import ClusterReport
from skills.kube.fields import EksClusterAccess
from skills.shared.progress import Progress
from skills.shared.tooling import Flatten, tool

Action = Literal["describe", "validate", "nccl_test"]


@tool(read_only=True, idempotent=True)
def inspect_eks_cluster(
    *,
    action: Annotated[Action, Field(description="See above.")] = "validate",
    access: Annotated[EksClusterAccess, Flatten()],
    checkpoint_pvc: p.CheckpointPvc = None,
    rdzv_backend: p.RdzvBackend = "c10d",
    instance_type: p.InstanceType = None,
    nccl_output: p.NcclOutput = None,
    progress: Progress | None = None,
) -> ClusterReport:
    """Read a GPU cluster; changes nothing. action: describe (node groups, GPU nodes);
    validate (checks, each fix); nccl_test (verdict on nccl_output). Fixes:
    manage_eks_cluster.

    validate gives each check's evidence and the fix it needs; nccl_test judges a saved
    all_reduce_perf output's bus bandwidth. To fix, scale or run the NCCL job:
    manage_eks_cluster."""
    return inspect(
        action,
        access,
        Options(access.namespace, checkpoint_pvc, rdzv_backend),
        instance_type,
        nccl_output,
        progress,
    )


main = main_for(inspect_eks_cluster)


if __name__ == "__main__":
    main()
