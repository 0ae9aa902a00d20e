"""What a Kubernetes node says about its GPUs, read from the Node object as the API
returns it (camelCase JSON): instance type, allocatable GPUs and EFA devices, and the
NVIDIA driver, product and compute capability that gpu-feature-discovery (GPU operator)
puts in its labels. The cluster checks, the describe view and the CUDA gate before a
job is submitted all read nodes through this one function.

The GPUs pods hold on a node are counted here too, once: describe's "in use" and
deploy's free-GPU check both call gpus_requested_by_node."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
# gpu-feature-discovery: the current driver label first, then the deprecated parts.
DRIVER_FULL_LABEL = "nvidia.com/cuda.driver-version.full"
DRIVER_PART_LABELS = (
    (
        "nvidia.com/cuda.driver-version.major",
        "nvidia.com/cuda.driver-version.minor",
        "nvidia.com/cuda.driver-version.revision",
    ),
    ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev"),
)
PRODUCT_LABEL = "nvidia.com/gpu.product"
COMPUTE_LABELS = ("nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor")
# Pods that ended free what they requested; every other phase (Pending on a node,
# Running, Unknown) still holds it, as the scheduler counts.
ENDED_PHASES = ("Succeeded", "Failed")
NOT_ENDED_SELECTOR = ",".join(f"status.phase!={phase}" for phase in ENDED_PHASES)


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


def container_gpu_request(container: dict[str, Any]) -> int:
    """The GPUs a container requests. An extended resource such as nvidia.com/gpu given
    only as a limit gets that limit as its request (Kubernetes' defaulting), so a
    limits-only container holds its GPUs too."""
    resources = container.get("resources") or {}
    asked = (resources.get("requests") or {}).get(GPU_RESOURCE)
    if asked is None:
        asked = (resources.get("limits") or {}).get(GPU_RESOURCE)
    return _quantity(asked)


def pod_gpu_request(pod_spec: dict[str, Any]) -> int:
    """A pod's effective GPU request, by the scheduler's rule: the larger of (its
    containers plus its sidecars) and the peak of its init phase, where init containers
    run one at a time beside the sidecars (restartPolicy Always) started before them."""
    sidecars = init_peak = 0
    for init in pod_spec.get("initContainers") or ():
        asked = container_gpu_request(init)
        if init.get("restartPolicy") == "Always":  # a sidecar: keeps running
            sidecars += asked
            init_peak = max(init_peak, sidecars)
        else:
            init_peak = max(init_peak, sidecars + asked)
    running = sum(container_gpu_request(c) for c in pod_spec.get("containers") or ())
    return max(running + sidecars, init_peak)


def gpus_requested_by_node(pods: list[dict[str, Any]]) -> dict[str, int]:
    """GPUs held per node: the effective requests of the pods bound to it that have not
    ended. Both describe and deploy's capacity check count through this one function."""
    used: dict[str, int] = {}
    for pod in pods:
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in ENDED_PHASES:
            continue
        used[node] = used.get(node, 0) + pod_gpu_request(spec)
    return used
