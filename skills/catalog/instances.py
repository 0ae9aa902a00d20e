"""The GPU and instance tables: each GPU's compute capability and CUDA range, and each
EC2 (or SageMaker `ml.`) GPU instance type's GPUs, memory per GPU, EFA and network.

Source: /work/shared/reference/CUDA-AND-FAILURES.md section 4 (EC2 instance pages);
tests/unit/test_image_compat.py checks every row against an independent value. Which CUDA
a GPU runs, and the CUDA/driver/torch tables, are in catalog/cuda.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from skills.shared.errors import ErrorCode, ToolFailure


@dataclass(frozen=True)
class GpuSpec:
    name: str
    sm: int
    min_cuda: str | None  # None: older than anything the tables list
    max_cuda: str | None  # None: no upper bound (V100: cu128 and CUDA 13 dropped sm_70)


GPUS: tuple[GpuSpec, ...] = (
    GpuSpec("T4", 75, "10.0", None),
    GpuSpec("A100", 80, "11.0", None),
    GpuSpec("A10G", 86, "11.1", None),
    GpuSpec("L4", 89, "11.8", None),
    GpuSpec("L40S", 89, "11.8", None),
    GpuSpec("H100", 90, "11.8", None),  # sm_90a kernels need 12.0
    GpuSpec("H200", 90, "11.8", None),
    GpuSpec("B200", 100, "12.8", None),  # cu128 wheels first came with torch 2.7
    GpuSpec("RTX PRO 6000", 120, "12.8", None),
    GpuSpec("V100", 70, None, "12.6"),
)
_GPUS = {g.name: g for g in GPUS}


def gpu(name: str) -> GpuSpec:
    return _GPUS[name]


@dataclass(frozen=True)
class InstanceSpec:
    name: str
    gpu: str
    gpus: int
    gib_per_gpu: int
    efa: bool
    efa_devices: int | None  # None: the table says only "yes"
    network: str
    # us-east-1 on-demand, as of pricing.PRICE_TABLE_DATE (pricing.py reads this column);
    # None: capacity blocks only
    usd_per_hour: float | None
    # EFA with RDMA read (GPUDirect RDMA): FI_EFA_USE_DEVICE_RDMA=1 is for these only;
    # libfabric aborts when it is set on an EFA device without it (g5, p3dn). g6/g6e have
    # it: AWS's EFA guide (docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html, read
    # 2026-12-06) says "RDMA read is supported on all instances with Nitro version 4 and
    # later"; its per-type table (which issue 51's review read for g6/g6e) was not
    # readable here.
    rdma: bool = False


def _i(
    name: str,
    gpu_name: str,
    gpus: int,
    gib: int,
    efa: int | bool,
    net: str,
    price: float | None,
    rdma: bool = False,
) -> InstanceSpec:
    devices = None if efa is True else int(efa)
    return InstanceSpec(name, gpu_name, gpus, gib, bool(efa), devices, net, price, rdma)


# p6-b200: 8 EFA devices, as AWS's own EFA regression manifests request (the EC2 page
# lists 8 network cards of 400 Gb).
INSTANCES: tuple[InstanceSpec, ...] = (
    _i("p4d.24xlarge", "A100", 8, 40, 4, "4x100 Gb", 21.96, rdma=True),
    _i("p4de.24xlarge", "A100", 8, 80, 4, "400 Gb", 27.45, rdma=True),
    _i("p5.48xlarge", "H100", 8, 80, 32, "3200 Gb", 55.04, rdma=True),
    _i("p5.4xlarge", "H100", 1, 80, True, "100 Gb", 6.88, rdma=True),
    _i("p5e.48xlarge", "H200", 8, 141, 32, "3200 Gb", None, rdma=True),
    _i("p5en.48xlarge", "H200", 8, 141, 16, "3200 Gb", 63.30, rdma=True),
    _i("p6-b200.48xlarge", "B200", 8, 179, 8, "3200 Gb", 113.93, rdma=True),
    _i("g5.xlarge", "A10G", 1, 22, 0, "<=25 Gb", 1.006),
    _i("g5.2xlarge", "A10G", 1, 22, 0, "<=25 Gb", 1.212),
    _i("g5.4xlarge", "A10G", 1, 22, 0, "<=25 Gb", 1.624),
    _i("g5.8xlarge", "A10G", 1, 22, True, "25 Gb", 2.448),
    _i("g5.16xlarge", "A10G", 1, 22, True, "25 Gb", 4.096),
    _i("g5.12xlarge", "A10G", 4, 22, 1, "40 Gb", 5.672),
    _i("g5.24xlarge", "A10G", 4, 22, 1, "50 Gb", 8.144),
    _i("g5.48xlarge", "A10G", 8, 22, 1, "100 Gb", 16.288),
    _i("g6.xlarge", "L4", 1, 22, 0, "<=25 Gb", 0.805),
    _i("g6.2xlarge", "L4", 1, 22, 0, "<=25 Gb", 0.978),
    _i("g6.4xlarge", "L4", 1, 22, 0, "<=25 Gb", 1.323),
    _i("g6.12xlarge", "L4", 4, 22, True, "40 Gb", 4.602, rdma=True),
    _i("g6.24xlarge", "L4", 4, 22, True, "50 Gb", 6.675, rdma=True),
    _i("g6.48xlarge", "L4", 8, 22, True, "100 Gb", 13.350, rdma=True),
    _i("g6e.xlarge", "L40S", 1, 44, 0, "<=20 Gb", 1.861),
    _i("g6e.2xlarge", "L40S", 1, 44, 0, "<=20 Gb", 2.242),
    _i("g6e.4xlarge", "L40S", 1, 44, 0, "<=20 Gb", 3.004),
    _i("g6e.12xlarge", "L40S", 4, 44, 1, "100 Gb", 10.493, rdma=True),
    _i("g6e.24xlarge", "L40S", 4, 44, 2, "200 Gb", 15.066, rdma=True),
    _i("g6e.48xlarge", "L40S", 8, 44, 4, "400 Gb", 30.131, rdma=True),
    # V100 (p3) is in the GPU table but not the instance table: counts and memory from the
    # EC2 instance page; no price recorded (None), so nothing is invented.
    _i("p3.2xlarge", "V100", 1, 16, 0, "<=10 Gb", None),
    _i("p3.8xlarge", "V100", 4, 16, 0, "10 Gb", None),
    _i("p3.16xlarge", "V100", 8, 16, 0, "25 Gb", None),
    _i("p3dn.24xlarge", "V100", 8, 32, 1, "100 Gb", None),
)
_INSTANCES = {i.name: i for i in INSTANCES}
SAGEMAKER_PREFIX = "ml."  # SageMaker names the same hardware ml.<ec2 name>


def instance_spec(name: str) -> InstanceSpec:
    """The instance (EC2 or SageMaker `ml.` name); an unknown name is the caller's input."""
    key = name.strip().lower().removeprefix(SAGEMAKER_PREFIX)
    if key in _INSTANCES:
        return _INSTANCES[key]
    raise ToolFailure(
        ErrorCode.INVALID_INPUT,
        f"unknown instance type {name!r}",
        "use a GPU instance type such as p5.48xlarge, p4d.24xlarge, g5.12xlarge, "
        "g6e.48xlarge or p6-b200.48xlarge (SageMaker: ml.p5.48xlarge)",
        {"instance_type": name, "known": sorted(_INSTANCES)},
    )


def gpu_for_instance(name: str) -> GpuSpec:
    return gpu(instance_spec(name).gpu)


# (vCPUs, memory GiB) of each instance, from the EC2 instance type pages: what a pod that
# takes a whole node can ask for (the model server's cpu/memory requests). Its own table,
# keyed by the rows' names: tests/unit/test_host_resources.py checks both cover the same.
HOST_RESOURCES: dict[str, tuple[int, int]] = {
    "p4d.24xlarge": (96, 1152),
    "p4de.24xlarge": (96, 1152),
    "p5.48xlarge": (192, 2048),
    "p5.4xlarge": (16, 256),
    "p5e.48xlarge": (192, 2048),
    "p5en.48xlarge": (192, 2048),
    "p6-b200.48xlarge": (192, 2048),
    "g5.xlarge": (4, 16),
    "g5.2xlarge": (8, 32),
    "g5.4xlarge": (16, 64),
    "g5.8xlarge": (32, 128),
    "g5.16xlarge": (64, 256),
    "g5.12xlarge": (48, 192),
    "g5.24xlarge": (96, 384),
    "g5.48xlarge": (192, 768),
    "g6.xlarge": (4, 16),
    "g6.2xlarge": (8, 32),
    "g6.4xlarge": (16, 64),
    "g6.12xlarge": (48, 192),
    "g6.24xlarge": (96, 384),
    "g6.48xlarge": (192, 768),
    "g6e.xlarge": (4, 32),
    "g6e.2xlarge": (8, 64),
    "g6e.4xlarge": (16, 128),
    "g6e.12xlarge": (48, 384),
    "g6e.24xlarge": (96, 768),
    "g6e.48xlarge": (192, 1536),
    "p3.2xlarge": (8, 61),
    "p3.8xlarge": (32, 244),
    "p3.16xlarge": (64, 488),
    "p3dn.24xlarge": (96, 768),
}


def host_resources(name: str) -> tuple[int, int]:
    """(vCPUs, memory GiB) of the instance (EC2 or SageMaker `ml.` name)."""
    return HOST_RESOURCES[instance_spec(name).name]


# --- NCCL over EFA: the libfabric/NCCL variables per instance family ----------------------
#
# Source: aws-ofi-nccl's own cheatsheet (github.com/aws/aws-ofi-nccl, doc/efa-env-var.md;
# the same table in aws-samples/awsome-distributed-training 1.architectures/
# efa-cheatsheet.md), read Nov 2026. For libfabric>=1.18 and aws-ofi-nccl>=1.7 (what the
# EFA installer in AWS's PyTorch DLCs ships) nothing is required; the rows keep:
# - FI_PROVIDER=efa: required by aws-ofi-nccl<=1.5 on every EFA GPU instance and harmless
#   after, so an image with an older plugin still uses EFA;
# - FI_EFA_USE_DEVICE_RDMA=1 only where EFA has RDMA read (p4/p5/p6, g6/g6e: InstanceSpec
#   .rdma): required by aws-ofi-nccl 1.6.x there, "not harmful" after, and libfabric
#   aborts with it on a device without RDMA read (g5, p3dn);
# - FI_EFA_USE_HUGE_PAGE=0: the cheatsheet's fix for `os.fork()` failing with "Cannot
#   allocate memory" under multi-process PyTorch data loaders (the trainer forks workers).
# Left out on purpose: FI_EFA_FORK_SAFE ("not needed anymore": the plugin sets it),
# NCCL_PROTO=simple (aws-ofi-nccl<=1.5 only), NCCL_MIN_CHANNELS/NCCL_BUFFSIZE ("leave it
# out"), RDMAV_* ("do not use"). Trainium (trn1/trn2) runs Neuron, not NCCL: not here.
_EFA_BASE = {"FI_PROVIDER": "efa", "FI_EFA_USE_HUGE_PAGE": "0"}
_EFA_RDMA = {**_EFA_BASE, "FI_EFA_USE_DEVICE_RDMA": "1"}
EFA_ENV_BY_FAMILY: dict[str, dict[str, str]] = {
    "p4d": _EFA_RDMA,
    "p4de": _EFA_RDMA,
    "p5": _EFA_RDMA,
    "p5e": _EFA_RDMA,
    "p5en": _EFA_RDMA,
    "p6-b200": _EFA_RDMA,
    "g5": _EFA_BASE,
    "g6": _EFA_RDMA,
    "g6e": _EFA_RDMA,
    "p3dn": _EFA_BASE,
}


def family(name: str) -> str:
    """p5.48xlarge -> p5 (a SageMaker ml. name too)."""
    return name.strip().lower().removeprefix(SAGEMAKER_PREFIX).split(".", 1)[0]


def efa_env_of(spec: InstanceSpec) -> dict[str, str]:
    """The NCCL-over-EFA variables for an instance with EFA (its family's row); {} without."""
    if not spec.efa:
        return {}
    return dict(EFA_ENV_BY_FAMILY[family(spec.name)])


def efa_env_generic(rdma: bool) -> dict[str, str]:
    """The same variables where only 'EFA, with or without RDMA read' is known (a Slurm
    partition's node features)."""
    return dict(_EFA_RDMA if rdma else _EFA_BASE)
