"""The cluster tools' shared inputs (manage_eks_cluster, inspect_eks_cluster): one
spelling of each field, its description and its grammar. Each is a module-level
`Annotated` alias, so a type checker reads it as a type (a call in an annotation is not).
How they reach the cluster (cluster_name, region, kubeconfig, context, namespace) is not
here: every cluster tool takes skills.kube.fields.ClusterAccess, and an action's own
parameters are declared on its spec (StorageSpec, ...; shared ones in
skills.eks_cluster_manager.params), which manage_eks_cluster flattens."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from skills.eks_cluster_manager.params import InstanceType, NcclOutput
from skills.shared.tooling import WaitSeconds
from skills.shared.validators import grammar

DNS = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"


# The schema says what a field is; the rules stay in validators (no bytes in tools/list).
# The one WaitSeconds, with this tool's own description (only nccl_test waits).
Wait = Annotated[WaitSeconds, Field(description="nccl_test: seconds to wait, then poll.")]

CheckpointPvc = Annotated[
    str | None, Field(description="PVC that must be Bound."), grammar(DNS, "a PVC name")
]
RdzvBackend = Annotated[Literal["c10d", "etcd"], Field(description="etcd: check its Service.")]

# inspect_eks_cluster's, declared with the action specs that take them too.
__all__ = ["CheckpointPvc", "InstanceType", "NcclOutput", "RdzvBackend", "Wait"]
