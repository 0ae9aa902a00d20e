"""manage_eks_cluster: describe, validate and fix an EKS GPU cluster; NCCL gate; scale;
kubeconfig without the aws CLI; an eksctl config for a new cluster."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

import datetime
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from commands import _eks_params as p
from commands._cli import run_cli
from skills.eks_cluster_manager import actions
from skills.eks_cluster_manager.checks import Options
from skills.eks_cluster_manager.eksctl import DEFAULT_KUBERNETES_VERSION
from skills.eks_cluster_manager.models import ClusterReport
from skills.kube.fields import EksClusterAccess, EksClusterWriteAccess
from skills.shared.confirm import Confirm
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.files import write_new_or_owned
from skills.shared.progress import NullProgress, Progress
from skills.shared.tooling import Flatten, spec_of, tool

Action = Literal[
    "describe", "validate", "auto_fix", "nccl_test", "scale", "kubeconfig", "create_config",
    "storage", "cleanup",
]  # fmt: skip


@tool(read_only=False, destructive=True, long=True)
def manage_eks_cluster(
    *,
    action: Annotated[Action, Field(description="See above.")] = "validate",
    access: Annotated[EksClusterWriteAccess, Flatten()],
    auto_fix: Annotated[Confirm, Field(description="= action auto_fix.")] = False,
    confirm: Annotated[
        Confirm,
        Field(description="Apply auto_fix/storage; cleanup; scale to 0; re-point; run eksctl."),
    ] = False,
    checkpoint_pvc: p.CheckpointPvc = None,
    rdzv_backend: p.RdzvBackend = "c10d",
    nodegroup: p.Nodegroup = None,
    min_size: p.MinSize = None,
    max_size: p.MaxSize = None,
    desired_size: p.DesiredSize = None,
    nodes: Annotated[int, Field(description="GPU nodes."), p.within(1, 256)] = 2,
    instance_type: p.InstanceType = None,
    image: p.Image = None,
    nccl_output: p.NcclOutput = None,
    volume_size: Annotated[int, Field(description="GPU node GiB."), p.within(20, 16384)] = 500,
    capacity_reservation_id: p.CapacityReservationId = None,
    output: p.EksctlOutput = None,
    fsx_size_gib: Annotated[
        int, Field(description="storage: FSx GiB (1200, 2400, n*2400)."), p.within(1200, 460800)
    ] = 1200,
    fsx_deployment_type: Annotated[
        Literal["SCRATCH_1", "SCRATCH_2", "PERSISTENT_1", "PERSISTENT_2"],
        Field(description="storage: FSx deployment type."),
    ] = "SCRATCH_2",
    fsx_throughput: Annotated[
        int | None, Field(description="storage: persistent FSx MB/s/TiB (P1 200, P2 250).")
    ] = None,
    kubernetes_version: Annotated[
        str, Field(pattern=r"^1\.\d{2}$", description="create_config: EKS Kubernetes version.")
    ] = DEFAULT_KUBERNETES_VERSION,
    bucket: Annotated[
        str | None, Field(description="storage/cleanup: S3 bucket (fsdp-eks-<cluster>-<account>).")
    ] = None,
    delete_bucket: Annotated[
        Literal["keep", "if_empty", "with_objects"], Field(description="cleanup: the bucket.")
    ] = "keep",
    delete_cluster: Annotated[bool, Field(description="cleanup: the cluster (eksctl).")] = False,
    only: Annotated[
        list[Literal["jobs", "model_servers", "nodegroups", "fsx"]] | None,
        Field(description="cleanup: only these parts."),
    ] = None,
    wait_seconds: p.Wait = None,
    progress: Progress | None = None,
) -> ClusterReport:
    """Check, fix and change a GPU cluster for FSDP jobs (EKS: cluster_name; any:
    kubeconfig). Reads only: inspect_eks_cluster. action: describe; validate; auto_fix
    (a plan; confirm applies); nccl_test (job as operation, or nccl_output); scale;
    kubeconfig (writes the named file; no aws CLI); create_config (eksctl); storage (FSx +
    S3 + PV/PVC: a plan; confirm applies); cleanup (what this suite made: a plan; confirm
    deletes)."""
    progress = progress or NullProgress()
    options = Options(
        namespace=access.namespace, checkpoint_pvc=checkpoint_pvc, rdzv_backend=rdzv_backend
    )
    if auto_fix and action == "validate":
        action = "auto_fix"  # what it changes is a plan until confirm says apply
    if action == "describe":
        return actions.describe(access, progress)
    if action == "validate":
        return actions.validate(access, options, progress)
    if action == "auto_fix":
        return actions.auto_fix(access, options, confirm, progress)
    if action == "scale":
        return actions.scale(access, nodegroup, (min_size, max_size, desired_size), confirm)
    if action == "kubeconfig":
        _need(access.kubeconfig, "kubeconfig", "kubeconfig", "Name the kubeconfig file to write "
              "(the CLI's default: $KUBECONFIG, else ~/.kube/config).")  # fmt: skip
        return actions.kubeconfig(access, confirm)
    if action == "storage":
        from skills.eks_cluster_manager.storage import DEFAULT_CLAIM, StorageSpec

        spec = StorageSpec(
            cluster=access.need_cluster("storage"),
            namespace=access.namespace,
            claim=checkpoint_pvc or DEFAULT_CLAIM,
            size_gib=fsx_size_gib,
            deployment_type=fsx_deployment_type,
            bucket=bucket,
            nodegroup=nodegroup,
            throughput=fsx_throughput,
        )
        return actions.storage(access, spec, confirm, progress)
    if action == "cleanup":
        from skills.eks_cluster_manager.cleanup import CleanupSpec, needs_parts

        spec = CleanupSpec(
            cluster=access.need_cluster("cleanup"),
            parts=needs_parts(list(only or [])),
            bucket=bucket,
            delete_bucket=delete_bucket,
            delete_cluster=delete_cluster,
        )
        return actions.cleanup(access, spec, confirm, progress)
    if action == "nccl_test":
        return _nccl(access, nodes, instance_type, image, nccl_output, wait_seconds, progress)
    return _create_config(
        access, instance_type, nodes, volume_size, capacity_reservation_id, output, confirm,
        kubernetes_version,
    )  # fmt: skip


def _need(value: str | None, field: str, action: str, hint: str) -> str:
    if value:
        return value
    raise ToolFailure(
        ErrorCode.INVALID_INPUT,
        f"action={action} needs {field}.",
        hint,
        {"problems": [{"field": field, "problem": f"required for {action}"}]},
    )


def _gpu_nodes_for(access: EksClusterAccess, instance_type: str, nodes: int) -> str:
    """Enough Ready nodes of that instance type (one list of nodes) before a job waits
    for them; returns the type as the nodes' label spells it (HyperPod: `ml.`)."""
    from skills.catalog.instances import instance_spec
    from skills.eks_cluster_manager.checks import known_instance
    from skills.kube.client import KubeJson
    from skills.kube.gpu_nodes import node_gpu_facts

    wanted = instance_spec(instance_type)
    facts = [node_gpu_facts(n) for n in KubeJson(access.api_client()).items("/api/v1/nodes")]
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
    access: EksClusterAccess,
    nodes: int,
    instance_type: str | None,
    image: str | None,
    nccl_output: str | None,
    wait_seconds: float | None,
    progress: Progress,
) -> ClusterReport:
    if nccl_output:
        return actions.judge_nccl_output(nccl_output, instance_type)
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
    from skills.operations import operations
    from skills.operations.operation_state import OperationState

    arguments = {
        "nodes": nodes,
        "instance_type": instance,
        "image": image,
        "namespace": access.namespace,
        "cluster_name": access.cluster_name,
        "region": access.region,
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
        raise state.as_failure("The NCCL test failed.")
    return report


def _create_config(
    access: EksClusterAccess,
    instance_type: str | None,
    nodes: int,
    volume_size: int,
    capacity_reservation_id: str | None,
    output: str | None,
    create: bool,
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION,
) -> ClusterReport:
    from skills.catalog.instances import instance_spec
    from skills.eks_cluster_manager import eksctl, zones

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
    if create and not output:  # the CLI names <cluster>-eksctl.yaml; an MCP caller names it
        _need(
            output,
            "output",
            "create_config with confirm",
            "Name the eksctl config file to write (under the workspace over MCP).",
        )
    gpu = instance_spec(instance)  # an unknown type fails here, before EC2 is asked
    placement = zones.read_placement(
        access.session().client("ec2", region_name=region),
        gpu.name,
        capacity_reservation_id,
        one_zone=gpu.efa,
    )
    config = eksctl.cluster_config(
        eksctl.ConfigSpec(
            cluster_name=cluster,
            region=region,
            instance_type=instance,
            nodes=nodes,
            kubernetes_version=kubernetes_version,
            volume_size=volume_size,
            capacity_reservation_id=capacity_reservation_id,
            cluster_zones=placement.cluster_zones,
            gpu_zones=placement.gpu_zones,
        )
    )
    text = eksctl.render(config)
    path = Path(output).expanduser().absolute() if output else None
    if path is not None:
        write_new_or_owned(path, text, owns=_is_eksctl_config)
    shown = path or Path(f"{cluster}-eksctl.yaml")
    command = eksctl.create_command(shown)
    report = ClusterReport(
        action="create_config",
        config_yaml=text,
        changes={
            "config_path": str(path) if path else None,
            "command": command,
            "availability_zones": list(placement.cluster_zones),
            "gpu_zones": list(placement.gpu_zones or placement.cluster_zones),
        },
        summary=f"ClusterConfig for {cluster}: {nodes} x {instance} in "
        f"{', '.join(placement.gpu_zones or placement.cluster_zones)} ({placement.why})",
        cost=eksctl.config_cost(config).model_dump(mode="json"),
    )
    note = eksctl.support_note(kubernetes_version, datetime.date.today().isoformat())
    if note and report.cost is not None:
        report.cost["notes"].append(note)
    if create:
        ran, tail = eksctl.run_create(shown)
        report.summary += "; eksctl create cluster ran" if ran else "; eksctl is not on PATH"
        if not ran:
            report.hint = f"Install eksctl, then run: {' '.join(command)}"
    else:
        report.hint = f"Save the config and run: {' '.join(command)}"
    return report


def _is_eksctl_config(head: bytes) -> bool:
    """A ClusterConfig (this action's own output), which writing again may replace."""
    return b"apiVersion: eksctl.io/" in head and b"kind: ClusterConfig" in head


_SEED_FLAGS = {"--validate_components", "--validate-components"}
_AUTO_FIX_FLAGS = {"--auto_fix", "--auto-fix"}


def cli(argv: Sequence[str]) -> int:
    """The CLI, which owns the machine: action=kubeconfig writes $KUBECONFIG (else
    ~/.kube/config) unless --kubeconfig names a file; create_config --confirm writes
    <cluster>-eksctl.yaml here unless --output names a file; and the seed's explicit
    `--validate_components --auto_fix` prints the plan (stderr), then applies it."""
    argv = list(argv)
    seed = bool(_SEED_FLAGS & set(argv))
    argv = [a for a in argv if a not in _SEED_FLAGS]  # validate is the default action
    creates = _is_action(argv, "create_config") and "--confirm" in argv
    if creates and not any(a.startswith("--output") for a in argv):
        argv += ["--output", f"{_flag_value(argv, 'cluster_name') or 'cluster'}-eksctl.yaml"]
    if _is_action(argv, "kubeconfig") and not any(a.startswith("--kubeconfig") for a in argv):
        from skills.kube.access import default_kubeconfig

        argv += ["--kubeconfig", str(default_kubeconfig())]
    if seed and _AUTO_FIX_FLAGS & set(argv) and "--confirm" not in argv:
        try:
            plan = spec_of(manage_eks_cluster).invoke(_plan_arguments(argv))
        except ToolFailure:
            return run_cli(manage_eks_cluster, argv)  # reports it as the CLI does
        if not isinstance(plan, ClusterReport):  # the spec's call is typed as any tool's
            raise TypeError(f"manage_eks_cluster returned {type(plan).__name__}")
        print(plan.summary, file=sys.stderr)
        for item in plan.plan or []:
            print(f"  {item.action} {item.kind} {item.name}", file=sys.stderr)
        argv.append("--confirm")
    return run_cli(manage_eks_cluster, argv)


def _is_action(argv: list[str], action: str) -> bool:
    return _flag_value(argv, "action") == action


def _flag_value(argv: list[str], name: str) -> str | None:
    """The value the flag for `name` was given (either spelling; as the next argument or
    after '='), or None."""
    spellings = {f"--{name}", f"--{name.replace('_', '-')}"}
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag in spellings:
            return value if eq else (argv[i + 1] if i + 1 < len(argv) else None)
    return None


def _plan_arguments(argv: list[str]) -> dict:
    from commands._cli import parse_flags

    raw, _ = parse_flags(spec_of(manage_eks_cluster), argv)
    return raw


def main(argv: Sequence[str] | None = None) -> None:
    raise SystemExit(cli(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    main()
