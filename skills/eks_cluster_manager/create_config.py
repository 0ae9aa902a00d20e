"""manage_eks_cluster(action=create_config): an eksctl ClusterConfig for a new GPU
cluster (zones read from EC2 for the instance type), written to the file the caller
names and, with confirm, `eksctl create cluster` run over it."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from pydantic import BaseModel, ConfigDict, Field

from skills.catalog.instances import instance_spec
from skills.eks_cluster_manager import eksctl, zones
from skills.eks_cluster_manager.eksctl import DEFAULT_KUBERNETES_VERSION
from skills.eks_cluster_manager.models import ClusterReport
from skills.eks_cluster_manager.params import NODES, PATH, InstanceType, Nodes, within
from skills.shared.errors import needed
from skills.shared.files import write_new_or_owned
from skills.shared.paths import LocalPath, absolute
from skills.shared.validators import grammar

if TYPE_CHECKING:
    from skills.kube.fields import ClusterAccess


class ConfigSpec(BaseModel):
    """action=create_config's parameters, each declared here once: manage_eks_cluster
    flattens this model into its inputs (schema, CLI flags, validation)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    instance_type: InstanceType = None
    nodes: Nodes = NODES
    volume_size: Annotated[int, Field(description="GPU node GiB."), within(20, 16384)] = 500
    capacity_reservation_id: Annotated[
        str | None, Field(description="cr-..."), grammar(r"cr-[0-9a-f]{8,17}", "cr-<hex>")
    ] = None
    # None: shown, not written. LocalPath: a file the tool writes (the workspace checks).
    output: Annotated[
        str | None,
        Field(description="eksctl config file to write."),
        grammar(PATH, "a path"),
        LocalPath(writable=True),
    ] = None
    kubernetes_version: Annotated[
        str, Field(pattern=r"^1\.\d{2}$", description="create_config: EKS version.")
    ] = DEFAULT_KUBERNETES_VERSION


def create_config(access: ClusterAccess, request: ConfigSpec, create: bool) -> ClusterReport:
    cluster = access.need_cluster("create_config")
    instance = needed(
        request.instance_type,
        "create_config",
        "instance_type",
        "Name the GPU instance type, e.g. p5.48xlarge.",
    )
    region = needed(
        access.region or access.session().region_name,
        "create_config",
        "region",
        "Pass region or set AWS_REGION.",
    )
    if create and not request.output:  # the CLI names <cluster>-eksctl.yaml; MCP names it
        needed(
            request.output,
            "create_config with confirm",
            "output",
            "Name the eksctl config file to write (under the workspace over MCP).",
        )
    gpu = instance_spec(instance)  # an unknown type fails here, before EC2 is asked
    placement = zones.read_placement(
        access.session().client("ec2", region_name=region),
        gpu.name,
        request.capacity_reservation_id,
        one_zone=gpu.efa,
    )
    config = eksctl.cluster_config(
        eksctl.ConfigSpec(
            cluster_name=cluster,
            region=region,
            instance_type=instance,
            nodes=request.nodes,
            kubernetes_version=request.kubernetes_version,
            volume_size=request.volume_size,
            capacity_reservation_id=request.capacity_reservation_id,
            cluster_zones=placement.cluster_zones,
            gpu_zones=placement.gpu_zones,
        )
    )
    text = eksctl.render(config)
    path = absolute(request.output) if request.output else None
    if path is not None:
        write_new_or_owned(path, text, owns=_is_eksctl_config)
    shown = path or Path(f"{cluster}-eksctl.yaml")
    command = eksctl.create_command(shown)
    zones_used = placement.gpu_zones or placement.cluster_zones
    report = ClusterReport(
        action="create_config",
        config_yaml=text,
        changes={
            "config_path": str(path) if path else None,
            "command": command,
            "availability_zones": list(placement.cluster_zones),
            "gpu_zones": list(zones_used),
        },
        summary=f"ClusterConfig for {cluster}: {request.nodes} x {instance} in "
        f"{', '.join(zones_used)} ({placement.why})",
        cost=eksctl.config_cost(config).model_dump(mode="json"),
    )
    note = eksctl.support_note(request.kubernetes_version, datetime.date.today().isoformat())
    if note and report.cost is not None:
        report.cost["notes"].append(note)
    if create:
        ran, _tail = eksctl.run_create(shown)
        report.summary += "; eksctl create cluster ran" if ran else "; eksctl is not on PATH"
        if not ran:
            report.hint = f"Install eksctl, then run: {' '.join(command)}"
    else:
        report.hint = f"Save the config and run: {' '.join(command)}"
    return report


def _is_eksctl_config(head: bytes) -> bool:
    """A ClusterConfig (this action's own output), which writing again may replace."""
    return b"apiVersion: eksctl.io/" in head and b"kind: ClusterConfig" in head
