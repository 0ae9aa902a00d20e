"""manage_eks_cluster: describe, validate and fix an EKS GPU cluster; NCCL gate; scale;
kubeconfig without the aws CLI; an eksctl config for a new cluster."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from skills.eks_cluster_manager import actions
from skills.eks_cluster_manager.checks import Options
from skills.eks_cluster_manager.models import ClusterReport
from skills.shared.cli import main_for
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.paths import LocalPath
from skills.shared.progress import NullProgress, Progress
from skills.shared.tooling import tool
from skills.shared.validators import grammar

Action = Literal[
    "describe", "validate", "auto_fix", "nccl_test", "scale", "kubeconfig", "create_config"
]
_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}"
_DNS = r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?"
_PATH = r"[^\x00\n]{1,4096}"


def _within(lo: int, hi: int) -> AfterValidator:
    def check(value: int | None) -> int | None:
        if value is not None and not lo <= value <= hi:
            raise ValueError(f"not within {lo}..{hi}")
        return value

    return AfterValidator(check)


# Parameter types: Annotated aliases (a type checker allows no calls in annotations).
_Size = Annotated[int | None, _within(0, 1000)]
_Name = Annotated[str | None, grammar(_NAME, "a name")]
_PvcName = Annotated[str | None, grammar(_DNS, "a PVC name")]
_Region = Annotated[str | None, grammar(r"[a-z]{2}(-[a-z]+)+-\d", "a region")]
_Context = Annotated[str | None, grammar(r"[^\s]{1,253}", "a context")]
_InstanceType = Annotated[str | None, grammar(r"[a-z0-9.-]{1,40}", "an instance type")]
_Image = Annotated[str | None, grammar(r"[^\s]{1,255}", "an image")]
_ReservationId = Annotated[str | None, grammar(r"cr-[0-9a-f]{8,17}", "cr-<hex>")]
_ReadPath = Annotated[str | None, grammar(_PATH, "a path"), LocalPath(writable=False)]
_WritePath = Annotated[str | None, grammar(_PATH, "a path"), LocalPath(writable=True)]


# The schema says what a field is; the rules stay in validators (no bytes in tools/list).
Wait = Annotated[
    float | None, Field(ge=0, le=86_400, description="nccl_test: seconds to wait, then poll.")
]


@tool(read_only=False, destructive=True, long=True)
def manage_eks_cluster(
    *,
    action: Annotated[Action, Field(description="See above.")] = "validate",
    cluster_name: Annotated[_Name, Field(description="EKS cluster.")] = None,
    region: Annotated[_Region, Field(description="AWS region.")] = None,
    kubeconfig: Annotated[
        _WritePath, Field(description="To use; action=kubeconfig writes it.")
    ] = None,
    context: Annotated[_Context, Field(description="Kubeconfig context.")] = None,
    namespace: Annotated[
        str, Field(description="For PVC, etcd, NCCL job."), grammar(_DNS, "a namespace")
    ] = "default",
    validate_components: Annotated[bool, Field(description="= action validate.")] = False,
    auto_fix: Annotated[bool, Field(description="Apply fixes of failed checks.")] = False,
    confirm: Annotated[bool, Field(description="Apply auto_fix; scale to 0; run eksctl.")] = False,
    checkpoint_pvc: Annotated[_PvcName, Field(description="PVC that must be Bound.")] = None,
    rdzv_backend: Annotated[
        Literal["c10d", "etcd"], Field(description="etcd: check its Service.")
    ] = "c10d",
    nodegroup: Annotated[_Name, Field(description="For scale.")] = None,
    min_size: Annotated[_Size, Field(description="Node group min.")] = None,
    max_size: Annotated[_Size, Field(description="Max.")] = None,
    desired_size: Annotated[_Size, Field(description="Desired.")] = None,
    nodes: Annotated[int, Field(description="GPU nodes."), _within(1, 256)] = 2,
    instance_type: Annotated[_InstanceType, Field(description="e.g. p5.48xlarge.")] = None,
    image: Annotated[_Image, Field(description="Image with torch for nccl_test.")] = None,
    nccl_output: Annotated[
        _ReadPath, Field(description="all_reduce_perf output to analyze.")
    ] = None,
    volume_size: Annotated[int, Field(description="GPU node GiB."), _within(20, 16384)] = 500,
    capacity_reservation_id: Annotated[_ReservationId, Field(description="cr-...")] = None,
    output: Annotated[_WritePath, Field(description="eksctl config file to write.")] = None,
    wait_seconds: Wait = None,
    progress: Progress | None = None,
) -> ClusterReport:
    """Check and fix a GPU cluster for FSDP jobs (EKS: cluster_name; any: kubeconfig).
    action: describe; validate (checks, evidence, fix); auto_fix (plan; confirm applies);
    nccl_test (busbw verdict; job as operation, or nccl_output); scale; kubeconfig (no
    aws CLI); create_config (eksctl)."""
    progress = progress or NullProgress()
    access = actions.Access(cluster_name, region, None, kubeconfig, context)
    options = Options(namespace=namespace, checkpoint_pvc=checkpoint_pvc, rdzv_backend=rdzv_backend)
    if action == "validate" and auto_fix:
        action = "auto_fix"  # the seed's `--validate_components --auto_fix`: plan and apply
        confirm = True
    if action == "describe":
        return actions.describe(access, progress)
    if action == "validate":
        return actions.validate(access, options, progress)
    if action == "auto_fix":
        return actions.auto_fix(access, options, confirm or auto_fix, progress)
    if action == "scale":
        return actions.scale(access, nodegroup, (min_size, max_size, desired_size), confirm)
    if action == "kubeconfig":
        return actions.kubeconfig(access)
    if action == "nccl_test":
        return _nccl(
            access, namespace, nodes, instance_type, image, nccl_output, wait_seconds, progress
        )
    return _create_config(
        access, instance_type, nodes, volume_size, capacity_reservation_id, output, confirm
    )


def _need(value: str | None, field: str, action: str, hint: str) -> str:
    if value:
        return value
    raise ToolFailure(
        ErrorCode.INVALID_INPUT,
        f"action={action} needs {field}.",
        hint,
        {"problems": [{"field": field, "problem": f"required for {action}"}]},
    )


def _gpu_nodes_for(access: actions.Access, instance_type: str, nodes: int) -> str:
    """Enough Ready nodes of that instance type (one list of nodes) before a job waits
    for them; returns the type as the nodes' label spells it (HyperPod: `ml.`)."""
    from skills.eks_cluster_manager.checks import known_instance
    from skills.image_builder.compat import instance_spec
    from skills.shared.gpu_nodes import node_gpu_facts

    wanted = instance_spec(instance_type)
    facts = [node_gpu_facts(n) for n in access.kube().items("/api/v1/nodes")]
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


def _nccl(
    access: actions.Access,
    namespace: str,
    nodes: int,
    instance_type: str | None,
    image: str | None,
    nccl_output: str | None,
    wait_seconds: float | None,
    progress: Progress,
) -> ClusterReport:
    from skills.eks_cluster_manager.nccl import parse
    from skills.image_builder.compat import instance_spec

    spec = instance_spec(instance_type) if instance_type else None
    if nccl_output:
        path = Path(nccl_output).expanduser()
        try:
            text = path.read_text(errors="replace")
        except OSError as exc:
            raise ToolFailure(
                ErrorCode.NOT_FOUND
                if isinstance(exc, FileNotFoundError)
                else ErrorCode.INVALID_INPUT,
                f"Cannot read nccl_output {path} ({type(exc).__name__}).",
                "Pass the path of a saved all_reduce_perf output file.",
                {"problems": [{"field": "nccl_output", "problem": "cannot be read"}]},
            ) from None
        report = parse(text, spec)
        return ClusterReport(
            action="nccl_test", nccl=report, summary=f"{report.verdict}: {report.reason}"
        )
    instance = _need(
        instance_type,
        "instance_type",
        "nccl_test",
        "Name the GPU nodes' instance type (action=describe shows it).",
    )
    image = _need(
        image,
        "image",
        "nccl_test",
        "Pass an image with torch and NCCL (the trainer image or an AWS DLC), or "
        "nccl_output to analyze a saved run.",
    )
    instance = _gpu_nodes_for(access, instance, nodes)
    from skills.eks_cluster_manager.nccl_job import NcclJobResult, run_nccl_test
    from skills.shared import operations
    from skills.shared.operation_state import OperationState
    from skills.shared.tooling import spec_of

    arguments = {
        "nodes": nodes,
        "instance_type": instance,
        "image": image,
        "namespace": namespace,
        "cluster_name": access.cluster_name,
        "region": access.region,
        "profile": access.profile,
        "kubeconfig": str(Path(access.kubeconfig).expanduser().absolute())
        if access.kubeconfig
        else None,
        "context": access.context,
        "wait_seconds": wait_seconds,
    }
    arguments = {k: v for k, v in arguments.items() if v is not None or k == "wait_seconds"}
    state = operations.call(spec_of(run_nccl_test), arguments, progress)
    operation = OperationState.model_validate(state.model_dump()).model_dump(
        mode="json", exclude={"result"}
    )
    report = ClusterReport(action="nccl_test", operation=operation)
    result = state.result
    if isinstance(result, NcclJobResult):  # the operation's model typed it so
        report.nccl = result.nccl
        report.summary = f"{result.nccl.verdict}: {result.nccl.reason}"
    elif state.status == "running":
        report.summary = f"NCCL test running as operation {state.operation_id}"
        report.next_step = state.next_step
    else:
        error = {"code": ErrorCode.OPERATION_FAILED, "message": "The NCCL test failed."}
        error.update(state.error or {})
        error["details"] = {"operation_id": state.operation_id, **(error.get("details") or {})}
        raise ToolFailure.from_dict(error)
    return report


def _create_config(
    access: actions.Access,
    instance_type: str | None,
    nodes: int,
    volume_size: int,
    capacity_reservation_id: str | None,
    output: str | None,
    create: bool,
) -> ClusterReport:
    from skills.eks_cluster_manager import eksctl

    cluster = access.need_cluster("create_config")
    instance = _need(
        instance_type,
        "instance_type",
        "create_config",
        "Name the GPU instance type, e.g. p5.48xlarge.",
    )
    region = _need(
        access.region or access.session().region_name,
        "region",
        "create_config",
        "Pass region or set AWS_REGION.",
    )
    config = eksctl.cluster_config(
        eksctl.ConfigSpec(
            cluster_name=cluster,
            region=region,
            instance_type=instance,
            nodes=nodes,
            volume_size=volume_size,
            capacity_reservation_id=capacity_reservation_id,
        )
    )
    text = eksctl.render(config)
    if create and not output:
        output = f"{cluster}-eksctl.yaml"
    path = Path(output).expanduser().absolute() if output else None
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    shown = path or Path(f"{cluster}-eksctl.yaml")
    command = eksctl.create_command(shown)
    report = ClusterReport(
        action="create_config",
        config_yaml=text,
        changes={"config_path": str(path) if path else None, "command": command},
        summary=f"ClusterConfig for {cluster}: {nodes} x {instance}",
    )
    if create:
        ran, tail = eksctl.run_create(shown)
        report.summary += "; eksctl create cluster ran" if ran else "; eksctl is not on PATH"
        if not ran:
            report.next_step = f"Install eksctl, then run: {' '.join(command)}"
    else:
        report.next_step = f"Save the config and run: {' '.join(command)}"
    return report


main = main_for(manage_eks_cluster)


if __name__ == "__main__":
    main()
