"""An eksctl ClusterConfig for a GPU training cluster: a small system node group, a GPU
node group (instance type, EFA with its placement group and single AZ, optional
capacity reservation, root volume), OIDC and the add-ons a training job uses; the zones
are read from EC2 (zones.py). No credentials ever go in: eksctl signs with the caller's
own AWS identity."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skills.catalog.instances import instance_spec
from skills.catalog.pricing import (
    CostEstimate,
    combine,
    estimate_eks_control_plane,
    estimate_instances,
    estimate_storage,
)
from skills.eks_cluster_manager.storage_kube import CSI_POLICY
from skills.shared.errors import ErrorCode, ToolFailure

SYSTEM_INSTANCE = "m5.xlarge"
# EKS standard support lasts 14 months from a version's EKS release, then extended
# support (at a higher control-plane price) for 12 more (docs.aws.amazon.com/eks/latest/
# userguide/kubernetes-versions.html). version -> (end of standard support, source), each
# read on 2026-12-06. No 1.37 row: no EKS release of 1.37 was on record that day.
_EOL = "endoflife.date/amazon-eks"
STANDARD_SUPPORT: dict[str, tuple[str, str]] = {
    "1.32": ("2026-03-23", f"{_EOL} (released 2025-01-25), read 2026-12-06"),
    "1.33": ("2026-07-29", f"{_EOL} (released 2025-05-28), read 2026-12-06"),
    "1.34": ("2026-12-02", f"{_EOL} (released 2025-10-06), read 2026-12-06"),
    "1.35": ("2027-03-27", f"{_EOL} (released 2026-01-28), read 2026-12-06"),
    "1.36": (
        "2027-08-02",
        f"{_EOL} (released 2026-06-02; extended support to 2028-08-02) as three public "
        "repositories transcribe it, read 2026-12-06",
    ),
}
STANDARD_SUPPORT_ENDS: dict[str, str] = {v: end for v, (end, _src) in STANDARD_SUPPORT.items()}
# The newest version in standard support on 2026-12-06.
DEFAULT_KUBERNETES_VERSION = "1.36"
ADDONS = (
    "vpc-cni",
    "coredns",
    "kube-proxy",
    "eks-pod-identity-agent",
    "aws-ebs-csi-driver",
    "aws-fsx-csi-driver",
)
# The FSx CSI add-on with its controller's IAM role (IRSA: the config has withOIDC), as
# storage_kube.csi_install_hint installs it on a cluster made without it.
ADDON_POLICIES: dict[str, list[str]] = {"aws-fsx-csi-driver": [CSI_POLICY]}


@dataclass(frozen=True)
class ConfigSpec:
    cluster_name: str
    region: str
    instance_type: str
    nodes: int
    kubernetes_version: str = DEFAULT_KUBERNETES_VERSION
    volume_size: int = 500
    capacity_reservation_id: str | None = None
    # From zones.read_placement: the cluster's zones (two or more) and the GPU node
    # group's (None: the cluster's).
    cluster_zones: tuple[str, ...] = ()
    gpu_zones: tuple[str, ...] | None = None


def support_note(version: str, today: str) -> str | None:
    """A note when `version`'s EKS standard support has ended by `today` (ISO date), or
    when this table has no date for it."""
    ends = STANDARD_SUPPORT_ENDS.get(version)
    if ends is None:
        # eksctl checks a version against EKS's own DescribeClusterVersions at create time
        # (eksctl v0.230.0 pkg/eks/versions_manager.go), not a list built into it.
        return (
            f"Kubernetes {version}: no EKS support dates on record here (known: "
            f"{', '.join(STANDARD_SUPPORT_ENDS)}); eksctl accepts it only if EKS offers it "
            "in the region (`aws eks describe-cluster-versions`)"
        )
    if today > ends:
        return (
            f"Kubernetes {version} left EKS standard support on {ends}: extended support "
            f"costs more per cluster hour; {DEFAULT_KUBERNETES_VERSION} is in standard support"
        )
    return None


def cluster_config(spec: ConfigSpec) -> dict[str, Any]:
    gpu = instance_spec(spec.instance_type)
    name = gpu.name  # the EC2 name (a SageMaker ml. name is HyperPod's, not eksctl's)
    group: dict[str, Any] = {
        "name": f"gpu-{name.split('.')[0]}",
        "instanceType": name,
        "minSize": 0,
        "maxSize": max(spec.nodes, 1),
        "desiredCapacity": spec.nodes,
        "volumeSize": spec.volume_size,
        "volumeType": "gp3",
        "privateNetworking": True,
        "labels": {"workload": "training"},
        "taints": [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}],
        "iam": {"withAddonPolicies": {"fsx": True, "imageBuilder": True}},
    }
    if gpu.efa:
        # EFA wants the nodes in one AZ; eksctl then also makes a cluster placement group.
        group["efaEnabled"] = True
    if spec.gpu_zones:
        group["availabilityZones"] = list(spec.gpu_zones)
    if spec.capacity_reservation_id:
        group["capacityReservation"] = {
            "capacityReservationTarget": {"capacityReservationID": spec.capacity_reservation_id}
        }
    return {
        "apiVersion": "eksctl.io/v1alpha5",
        "kind": "ClusterConfig",
        "metadata": {
            "name": spec.cluster_name,
            "region": spec.region,
            "version": spec.kubernetes_version,
            "tags": {"created-by": "fsdp-eks"},
        },
        **({"availabilityZones": list(spec.cluster_zones)} if spec.cluster_zones else {}),
        "iam": {"withOIDC": True},
        "addons": [
            {"name": a, **({"attachPolicyARNs": ADDON_POLICIES[a]} if a in ADDON_POLICIES else {})}
            for a in ADDONS
        ],
        "managedNodeGroups": [
            {
                "name": "system",
                "instanceType": SYSTEM_INSTANCE,
                "minSize": 1,
                "maxSize": 3,
                "desiredCapacity": 2,
                "volumeSize": 100,
                "volumeType": "gp3",
                "privateNetworking": True,
                "labels": {"workload": "system"},
            },
            group,
        ],
    }


def config_cost(config: dict[str, Any]) -> CostEstimate:
    """What the cluster the config creates costs to hold: each node group's instances
    and gp3 root volumes at their desired size, and the EKS control plane."""
    region = config["metadata"]["region"]
    parts = [estimate_eks_control_plane(region)]
    for group in config.get("managedNodeGroups", []):
        count = int(group.get("desiredCapacity", 0))
        parts.append(estimate_instances(group.get("instanceType"), count, region))
        parts.append(estimate_storage("ebs_gp3", count * int(group.get("volumeSize", 80)), region))
    nodes = " + ".join(
        f"{g.get('desiredCapacity', 0)} x {g.get('instanceType')}"
        for g in config.get("managedNodeGroups", [])
    )
    return combine(f"cluster {config['metadata']['name']} ({nodes})", parts)


def render(config: dict[str, Any]) -> str:
    import yaml

    return yaml.safe_dump(config, sort_keys=False)


def create_command(path: Path) -> list[str]:
    return ["eksctl", "create", "cluster", "-f", str(path)]


def run_create(path: Path) -> tuple[bool, str]:
    """Run eksctl when it is on PATH: (ran, output tail). Not there: (False, '')."""
    binary = shutil.which("eksctl")
    if binary is None:
        return False, ""
    done = subprocess.run(
        [binary, *create_command(path)[1:]], capture_output=True, text=True, check=False
    )
    tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
    if done.returncode != 0:
        raise ToolFailure(
            ErrorCode.OPERATION_FAILED,
            f"eksctl create cluster exited {done.returncode}.",
            "Read its output in details; fix and rerun the command with the same file.",
            {"output_tail": tail, "config_path": str(path)},
        )
    return True, tail
