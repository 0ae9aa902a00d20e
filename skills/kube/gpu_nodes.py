"""What a Kubernetes node says about its GPUs, read from the Node object as the API
returns it (camelCase JSON): instance type, allocatable GPUs and EFA devices, and the
NVIDIA driver, product and compute capability that gpu-feature-discovery (GPU operator)
puts in its labels. The cluster checks, the describe view and the CUDA gate before a
job is submitted all read nodes through this one function."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
# gpu-feature-discovery: the current driver label first, then the deprecated parts.
DRIVER_FULL_LABEL = "nvidia.com/cuda.driver-version.full"
DRIVER_PART_LABELS = (
    ("nvidia.com/cuda.driver-version.major", "nvidia.com/cuda.driver-version.minor",
     "nvidia.com/cuda.driver-version.revision"),
    ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev"),
)  # fmt: skip
PRODUCT_LABEL = "nvidia.com/gpu.product"
COMPUTE_LABELS = ("nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor")


@dataclass(frozen=True)
class NodeGpuFacts:
    name: str
    instance_type: str | None
    ready: bool
    gpus_allocatable: int
    efa_allocatable: int
    driver_version: str | None  # e.g. "535.104.05"; None: no label says
    gpu_product: str | None  # e.g. "NVIDIA-H100-80GB-HBM3"
    compute_capability: int | None  # sm as an integer, e.g. 90; None: no label says


def _quantity(value: Any) -> int:
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def driver_version(labels: dict[str, str]) -> str | None:
    if labels.get(DRIVER_FULL_LABEL):
        return labels[DRIVER_FULL_LABEL]
    for major, minor, rev in DRIVER_PART_LABELS:
        if labels.get(major):
            parts = [labels[major], labels.get(minor), labels.get(rev)]
            return ".".join(p for p in parts if p)
    return None


def node_gpu_facts(node: dict[str, Any]) -> NodeGpuFacts:
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
    instance_type = next((labels[k] for k in INSTANCE_TYPE_LABELS if labels.get(k)), None)
    major, minor = (labels.get(k) for k in COMPUTE_LABELS)
    sm = int(major) * 10 + int(minor or 0) if major and major.isdigit() else None
    return NodeGpuFacts(
        name=meta.get("name", ""),
        instance_type=instance_type,
        ready=ready,
        gpus_allocatable=_quantity(allocatable.get(GPU_RESOURCE)),
        efa_allocatable=_quantity(allocatable.get(EFA_RESOURCE)),
        driver_version=driver_version(labels),
        gpu_product=labels.get(PRODUCT_LABEL),
        compute_capability=sm,
    )
