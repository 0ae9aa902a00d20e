"""THE EFA/NCCL environment: one function for the variables and one for the pod resources,
called by the PyTorchJob manifest, the cluster's NCCL test job and the Slurm script, so
the NCCL check tests the setup of the job it vouches for.

Sources: aws-samples/aws-efa-eks (examples/simple/nccl-efa-tests.yaml: hugepages-2Mi
5120Mi, memory 8000Mi, "the most important setting"); the variables are the catalogue's
per instance family (catalog/instances.py EFA_ENV_BY_FAMILY, with its sources)."""

from __future__ import annotations

from collections.abc import Mapping

from skills.catalog.instances import InstanceSpec, efa_env_generic, efa_env_of, instance_spec
from skills.kube.gpu_nodes import EFA_RESOURCE
from skills.shared.errors import ToolFailure

EFA_TAINT = "aws.amazon.com/efa"
HUGEPAGES_RESOURCE = "hugepages-2Mi"
HUGEPAGES = "5120Mi"  # libfabric's EFA provider allocates its buffers from 2 MiB pages
# A memory request is required next to hugepages (the API rejects hugepages without a cpu
# or memory request). A request only: a limit would cap the trainer's own memory.
MEMORY_REQUEST = "8000Mi"


def efa_env(efa: bool, rdma: bool) -> dict[str, str]:
    """The libfabric variables for NCCL over EFA where only EFA and RDMA read are known
    (a Slurm partition); empty without EFA."""
    return efa_env_generic(rdma) if efa else {}


def instance_efa(instance_type: str | None) -> InstanceSpec | None:
    """The catalogue row when the instance type has EFA; None otherwise."""
    if instance_type is None:
        return None
    spec = instance_spec(instance_type)
    return spec if spec.efa else None


def has_rdma(instance_type: str) -> bool:
    """The catalogue says this type's EFA has RDMA read; False for a name it lacks."""
    try:
        return instance_spec(instance_type).rdma
    except ToolFailure:
        return False


def efa_env_for(instance_type: str | None) -> dict[str, str]:
    """The instance family's row of the catalogue; empty without EFA."""
    spec = instance_efa(instance_type)
    return efa_env_of(spec) if spec is not None else {}


def efa_devices(instance_type: str | None) -> int:
    """EFA devices to request: the catalogue's count; 1 where it only says the type has
    EFA; 0 without EFA or without an instance type."""
    spec = instance_efa(instance_type)
    return 0 if spec is None else spec.efa_devices or 1


# libfabric's boolean spellings (fi_param_get_bool); anything else leaves the default.
_OFF = frozenset({"0", "false", "no", "off"})


def uses_huge_pages(env: Mapping[str, str]) -> bool:
    """Whether libfabric's EFA provider takes its buffers from huge pages with this
    environment: FI_EFA_USE_HUGE_PAGE off (0/false/no/off) says no; unset (libfabric's
    default: use them) or on says yes. The one place the pod's hugepages request and its
    variables are decided together (the PyTorchJob, the TrainJob runtime, the NCCL test)."""
    return env.get("FI_EFA_USE_HUGE_PAGE", "1").strip().lower() not in _OFF


def efa_limits(instance_type: str | None, env: Mapping[str, str]) -> dict[str, str]:
    """Limits (= requests) an EFA pod adds: the devices, and the huge pages when the
    environment the pod gets (`env`, the job's own variables included) lets libfabric use
    them; empty without EFA."""
    devices = efa_devices(instance_type)
    if not devices:
        return {}
    pages = {HUGEPAGES_RESOURCE: HUGEPAGES} if uses_huge_pages(env) else {}
    return {EFA_RESOURCE: str(devices), **pages}


def efa_requests(instance_type: str | None, env: Mapping[str, str]) -> dict[str, str]:
    """Requests only (no limit) an EFA pod adds next to efa_limits: the memory request
    the API wants beside hugepages; empty when it asks for none."""
    return (
        {"memory": MEMORY_REQUEST} if HUGEPAGES_RESOURCE in efa_limits(instance_type, env) else {}
    )


# GPU node groups carry nvidia.com/gpu, EFA node groups also aws.amazon.com/efa (EKS's
# and eksctl's EFA node groups): a GPU pod tolerates both (a toleration of a taint a node
# lacks changes nothing).
GPU_TOLERATIONS: tuple[dict[str, str], ...] = tuple(
    {"key": key, "operator": "Exists", "effect": "NoSchedule"}
    for key in ("nvidia.com/gpu", EFA_TAINT)
)
