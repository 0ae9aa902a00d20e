"""The Kubernetes target's settings: how to reach the cluster (every job tool takes
these) and, for deploy only, how to place the job (KubernetesDeploySettings), so the
read-only job tools' schemas stay small."""

from __future__ import annotations

import posixpath
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from skills.kube.fields import (
    ClusterAccess,
)
from skills.shared.confirm import Confirm
from skills.training_job_deployer.targets.base import TargetSettings

DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
HOST_PORT = r"^[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?:\d{1,5}$"
DEFAULT_HOST_PATH = "/mnt/k8s-disks/0/checkpoints"


# The node's own directories: a hostPath at or under one of these is refused; the bare
# parents of data directories (/, /var, /mnt, /home...) are refused themselves only.
_SYSTEM_TREES = (
    "/etc",
    "/proc",
    "/sys",
    "/dev",
    "/boot",
    "/root",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/run",
    "/var/run",
    "/var/lib/kubelet",
    "/var/lib/containerd",
    "/var/lib/docker",
    "/var/log",
    "/var/lib/cni",
    "/opt/cni",
    "/etc/kubernetes",
)
_SYSTEM_DIRS = ("/", "/var", "/var/lib", "/home", "/mnt", "/opt", "/srv", "/tmp", "/snap")


def is_system_path(path: str) -> bool:
    """True for a node path that is (or is under) a directory the node itself needs."""
    normal = posixpath.normpath("/" + path.lstrip("/")).replace("//", "/")
    if normal in _SYSTEM_DIRS:
        return True
    return any(normal == tree or normal.startswith(tree + "/") for tree in _SYSTEM_TREES)


class KubernetesSettings(ClusterAccess, TargetSettings):
    """a Kubeflow job"""

    target: Literal["kubernetes"] = "kubernetes"


class KubernetesDeploySettings(KubernetesSettings):
    """a Kubeflow job"""

    engine: Annotated[
        Literal["auto", "pytorchjob", "trainjob"],
        Field(description="Job kind; auto: TrainJob if served, else PyTorchJob."),
    ] = "auto"
    queue: Annotated[
        str | None, Field(pattern=DNS_SUBDOMAIN, description="Kueue LocalQueue to submit to.")
    ] = None
    runtime: Annotated[
        str | None,
        Field(
            pattern=DNS_SUBDOMAIN,
            description="TrainJob's ClusterTrainingRuntime (default: "
            "the suite's fsdp-eks-torch; torch-distributed: upstream's).",
        ),
    ] = None

    instance_type: Annotated[
        str | None,
        Field(pattern=r"^[a-z0-9.-]{1,40}$", description="GPU instance type, e.g. p5.48xlarge."),
    ] = None
    image_uri: Annotated[
        str | None,
        Field(
            pattern=r"^[^\s\x00-\x1f-][^\s\x00-\x1f]{0,511}$",
            description="Trainer image (default: newest in repository).",
        ),
    ] = None
    repository: Annotated[
        str | None,
        Field(
            pattern=r"^[a-z0-9][a-z0-9._/-]{0,254}$",
            description="ECR repository (default ECR_REPOSITORY).",
        ),
    ] = None
    checkpoint_volume: Annotated[
        str,
        Field(
            pattern=r"^(/[^\x00-\x1f]{0,4095}|pvc:[a-z0-9]([-a-z0-9.]*[a-z0-9])?)$",
            description="Node dir (hostPath) or pvc:<claim> mounted at /checkpoints.",
        ),
    ] = DEFAULT_HOST_PATH

    @field_validator("checkpoint_volume")
    @classmethod
    def _not_a_system_path(cls, volume: str) -> str:
        if not volume.startswith("pvc:") and is_system_path(volume):
            raise ValueError(
                f"{volume} is a system directory of the node; a read-write hostPath there "
                "would hand the node to the job. Use a data directory (default "
                f"{DEFAULT_HOST_PATH}) or pvc:<claim>"
            )
        return volume

    etcd_endpoint: Annotated[
        str | None, Field(pattern=HOST_PORT, description="etcd host:port: etcd rendezvous.")
    ] = None
    min_nodes: Annotated[
        int | None, Field(ge=1, le=1024, description="Elastic: fewest nodes to run on.")
    ] = None
    max_nodes: Annotated[
        int | None, Field(ge=1, le=1024, description="Elastic: most nodes to run on.")
    ] = None
    shm_size_gib: Annotated[
        int | None, Field(ge=1, le=2048, description="/dev/shm GiB (default 8 per process).")
    ] = None
    nccl_socket_ifname: Annotated[
        str | None,
        Field(pattern=r"^\^?[A-Za-z0-9_.,=^-]{1,200}$", description="NCCL_SOCKET_IFNAME."),
    ] = None
    replace: Annotated[Confirm, Field(description="Delete a job of the same name first.")] = False
    confirm: Annotated[Confirm, Field(description="Confirm replace of a running job.")] = False
    skip_gate: Annotated[
        bool, Field(strict=True, description="Skip the driver/CUDA check before submit.")
    ] = False

    @model_validator(mode="after")
    def _elastic_range(self) -> KubernetesDeploySettings:
        if self.min_nodes and self.max_nodes and self.min_nodes > self.max_nodes:
            raise ValueError("min_nodes must not exceed max_nodes")
        return self
