"""manage_eks_cluster(action=nccl_test): a saved output judged here, or the NCCL job
(nccl_job) started as an operation once the cluster has the Ready GPU nodes it asks
for, its state mapped back onto the cluster report."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from skills.catalog.instances import instance_spec
from skills.eks_cluster_manager.actions import judge_nccl_output
from skills.eks_cluster_manager.checks import known_instance
from skills.eks_cluster_manager.models import ClusterReport
from skills.eks_cluster_manager.nccl_job import NcclJobResult, run_nccl_test
from skills.eks_cluster_manager.params import NODES, InstanceType, NcclOutput, Nodes
from skills.kube.client import KubeJson
from skills.kube.gpu_nodes import node_gpu_facts
from skills.kube.objects import kind_path
from skills.operations.operation_state import OperationState
from skills.operations.operations import run_as_operation
from skills.shared.errors import ErrorCode, ToolFailure, needed
from skills.shared.paths import absolute
from skills.shared.progress import Progress
from skills.shared.tooling import spec_of
from skills.shared.validators import grammar

if TYPE_CHECKING:
    from skills.kube.fields import ClusterAccess


class NcclSpec(BaseModel):
    """action=nccl_test's parameters, each declared here once: manage_eks_cluster flattens
    this model into its inputs (schema, CLI flags, validation) and gathers them back."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    nodes: Nodes = NODES
    instance_type: InstanceType = None
    image: Annotated[
        str | None,
        Field(description="nccl_test image (with torch)."),
        grammar(r"[^\s]{1,255}", "an image"),
    ] = None
    nccl_output: NcclOutput = None  # a saved run: judged, nothing runs


def gpu_nodes_for(access: ClusterAccess, instance_type: str, nodes: int) -> str:
    """Enough Ready nodes of that instance type (one list of nodes) before a job waits
    for them; returns the type as the nodes' label spells it (HyperPod: `ml.`)."""
    wanted = instance_spec(instance_type)
    facts = [node_gpu_facts(n) for n in KubeJson(access.api_client()).items(kind_path("Node"))]
    ready = [
        f
        for f in facts
        if f.ready and getattr(known_instance(f.instance_type), "name", None) == wanted.name
    ]
    if len(ready) < nodes:
        present = sorted({f.instance_type for f in facts if f.ready and f.instance_type})
        raise ToolFailure(
            ErrorCode.NOT_ENOUGH_GPUS,
            f"nccl_test wants {nodes} Ready {wanted.name} node(s); the cluster has {len(ready)}.",
            "Lower nodes, scale the node group up (action=scale), or name an instance type "
            f"the cluster has: {', '.join(present) or 'none Ready'}.",
            {"ready": len(ready), "instance_types": present},
        )
    return ready[0].instance_type or wanted.name


def nccl_test(
    access: ClusterAccess, request: NcclSpec, wait_seconds: float | None, progress: Progress
) -> ClusterReport:
    if request.nccl_output:
        return judge_nccl_output(request.nccl_output, request.instance_type)
    instance = needed(
        request.instance_type,
        "nccl_test",
        "instance_type",
        "Name the GPU nodes' instance type (action=describe shows it).",
    )
    image = needed(
        request.image,
        "nccl_test",
        "image",
        "Pass an image with torch and NCCL (the trainer image or an AWS DLC), or "
        "nccl_output to analyze a saved run.",
    )
    instance = gpu_nodes_for(access, instance, request.nodes)

    arguments = {
        "nodes": request.nodes,
        "instance_type": instance,
        "image": image,
        "namespace": access.namespace,
        "cluster_name": access.cluster_name,
        "region": access.region,
        "kubeconfig": str(absolute(access.kubeconfig)) if access.kubeconfig else None,
        "context": access.context,
        "wait_seconds": wait_seconds,
    }
    arguments = {k: v for k, v in arguments.items() if v is not None or k == "wait_seconds"}
    return run_as_operation(
        spec_of(run_nccl_test),
        arguments,
        progress,
        result=NcclJobResult,
        ended=_ended,
        running=_running,
        failed="The NCCL test failed.",
    )


def _report(state: OperationState) -> ClusterReport:
    operation: dict[str, Any] = OperationState.model_validate(state.model_dump()).model_dump(
        mode="json", exclude={"result"}
    )
    return ClusterReport(action="nccl_test", operation=operation)


def _ended(result: NcclJobResult, state: OperationState) -> ClusterReport:
    report = _report(state)
    report.nccl = result.nccl
    report.summary = f"{result.nccl.verdict}: {result.nccl.reason}"
    return report


def _running(state: OperationState) -> ClusterReport:
    report = _report(state)
    report.summary = f"NCCL test running as operation {state.operation_id}"
    report.next_step = state.next_step
    return report
