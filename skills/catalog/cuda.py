"""CUDA / PyTorch / driver / GPU compatibility facts as data, and small pure lookups.

Source: /work/shared/reference/CUDA-AND-FAILURES.md sections 1-4 (PyTorch release matrix,
NVIDIA driver table, aws/deep-learning-containers, EC2 instance pages), and for the rows
added or corrected on READ (issue 51) the source each row names. One table per fact set;
tests/unit/test_image_compat.py checks every row against an independent value.
Versions are strings ("2.5.1", "12.4"); compare them with `vtuple`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from skills.catalog.instances import gpu

Flavor = Literal["runtime", "devel"]


def vtuple(version: str) -> tuple[int, ...]:
    """ "12.4" -> (12, 4); "2.5.1+cu124" -> (2, 5, 1); "580" -> (580,)."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0]))


def torch_minor(torch: str) -> str:
    """ "2.5.1+cu124" -> "2.5"."""
    major, minor = vtuple(torch)[:2]
    return f"{major}.{minor}"


def cu_tag(cuda: str) -> str:
    """ "12.4" -> "cu124" (the wheel index / local-version spelling)."""
    major, minor = vtuple(cuda)[:2]
    return f"cu{major}{minor}"


def cuda_from_cu(tag: str) -> str:
    """ "cu124" -> "12.4", "cu118" -> "11.8", "cu130" -> "13.0" (the last digit is the minor)."""
    digits = tag.lower().removeprefix("cu")
    return f"{int(digits[:-1])}.{digits[-1]}"


# --- Section 1: PyTorch wheels and official images -------------------------------------


class OfficialImage(NamedTuple):
    """One published pytorch/pytorch image line: <torch>-cuda<cuda>-cudnn<cudnn>-{flavor}."""

    torch: str
    cuda: str
    cudnn: int
    python: str | None = None  # the image's interpreter; None: not read from a source


READ = "2026-12-06"  # the date the sources named below were read (issue 51)
REFERENCE = "CUDA-AND-FAILURES.md (shared reference)"
# Docker Hub's pytorch/pytorch tag list as one user's log quotes it (cuda12.6 tags from
# 2.6.0 to 2.13.0, 2.12.1 among them): read through the code index, id 60737442283.
HUB_CU126_LIST = "hub.docker.com/r/pytorch/pytorch tags, as quoted in a public log"


@dataclass(frozen=True)
class TorchRelease:
    minor: str
    python_min: str
    python_max: str
    wheel_cudas: tuple[str, ...]
    images: tuple[OfficialImage, ...]
    source: str = REFERENCE  # where this row's facts were read, and what was not verified


def _images(
    torch: tuple[str, ...], cudas: tuple[str, ...], cudnn: int, python: str | None = None
) -> tuple[OfficialImage, ...]:
    return tuple(OfficialImage(t, c, cudnn, python) for t in torch for c in cudas)


TORCH_RELEASES: tuple[TorchRelease, ...] = (
    TorchRelease(
        "2.1",
        "3.8",
        "3.11",
        ("11.8", "12.1"),
        _images(("2.1.0", "2.1.1", "2.1.2"), ("11.8", "12.1"), 8),
    ),
    # The table lists no 2.2 image; 2.3's is 2.3.1 on CUDA 12.1.
    TorchRelease("2.2", "3.8", "3.11", ("11.8", "12.1"), ()),
    TorchRelease("2.3", "3.8", "3.11", ("11.8", "12.1"), _images(("2.3.1",), ("12.1",), 8)),
    # cuDNN 9 from 2.4 on.
    TorchRelease("2.4", "3.8", "3.12", ("11.8", "12.1", "12.4"), _images(("2.4.1",), ("12.4",), 9)),
    TorchRelease("2.5", "3.9", "3.12", ("11.8", "12.1", "12.4"), _images(("2.5.1",), ("12.4",), 9)),
    TorchRelease("2.6", "3.9", "3.13", ("11.8", "12.4", "12.6"), _images(("2.6.0",), ("12.6",), 9)),
    TorchRelease("2.7", "3.9", "3.13", ("11.8", "12.6", "12.8"), _images(("2.7.1",), ("12.8",), 9)),
    TorchRelease("2.8", "3.9", "3.13", ("12.6", "12.8", "12.9"), _images(("2.8.0",), ("12.9",), 9)),
    TorchRelease(
        "2.9", "3.10", "3.14", ("12.6", "12.8", "13.0"), _images(("2.9.1",), ("13.0",), 9)
    ),
    TorchRelease(
        "2.10", "3.10", "3.14", ("12.6", "12.8", "13.0"), _images(("2.10.0",), ("13.0",), 9)
    ),
    TorchRelease(
        "2.11",
        "3.10",
        "3.14",
        ("12.6", "12.8", "13.0"),
        _images(("2.11.0",), ("12.6", "12.8", "13.0"), 9),
        f"{REFERENCE} (12.8); {HUB_CU126_LIST} (12.6); 13.0 tags pinned by digest in public "
        f"Dockerfiles (sha256:bfbb4a2b...); read {READ}",
    ),
    TorchRelease(
        "2.12",
        "3.10",
        "3.14",
        ("12.6", "13.0", "13.2"),
        (*_images(("2.12.0",), ("12.6", "13.0", "13.2"), 9), *_images(("2.12.1",), ("12.6",), 9)),
        f"{REFERENCE} (13.0); {HUB_CU126_LIST} (2.12.0 and 2.12.1 on 12.6); 13.2 runtime and "
        f"devel tags in public Dockerfiles (2.12.1 on 13.0/13.2 not seen); read {READ}",
    ),
    TorchRelease(
        "2.13",
        "3.10",
        "3.15",
        ("12.6", "13.0", "13.2"),
        _images(("2.13.0",), ("12.6", "13.0", "13.2"), 9),
        f"{REFERENCE} (13.0, 13.2); {HUB_CU126_LIST} (12.6); read {READ}",
    ),
    TorchRelease(
        "2.14",
        "3.10",
        "3.15",
        ("12.6", "13.0", "13.2"),
        _images(("2.14.0",), ("12.6", "13.0", "13.2"), 9, "3.12"),
        "tags 2.14.0-cuda{12.6,13.0,13.2}-cudnn9-{runtime,devel} in public Dockerfiles, one "
        "pinned by digest (sha256:9c99fafa...); 12.6-devel: Ubuntu 24.04, Python 3.12.3, "
        "torch 2.14.0+cu126 (a public build log); wheels +cu126/+cu130/+cu132 seen installed; "
        f"Python range [unverified: as 2.13's]; read {READ}",
    ),
    TorchRelease(
        "2.15",
        "3.10",
        "3.15",
        ("13.0", "13.2"),
        _images(("2.15.0",), ("13.0", "13.2"), 9),
        "wheels 2.15.0+cu130 and +cu132 seen installed in public reports (a +cu134 pin was "
        "seen too; left out: no CUDA 13.4 driver row here); images [unverified: no "
        "pytorch/pytorch:2.15 tag was found in the stored corpora; listed as the 2.12-2.14 "
        f"pattern, one image per wheel CUDA]; Python range [unverified]; read {READ}",
    ),
)
_RELEASES = {r.minor: r for r in TORCH_RELEASES}

OFFICIAL_REPOSITORY = "pytorch/pytorch"

# The labels build_image puts on an image (from its analysis of the final Dockerfile) and
# the CUDA gate reads back before a submit.
TORCH_LABEL = "fsdp-eks.torch"
CUDA_LABEL = "fsdp-eks.cuda"
PYTHON_LABEL = "fsdp-eks.python"
# "true" when the image has the EFA user space NCCL needs (libfabric + aws-ofi-nccl),
# "false" when the analysis knows it has not; no label when it cannot tell (an unknown base).
EFA_LABEL = "fsdp-eks.efa"
PYTORCH_WHEEL_INDEX = "https://download.pytorch.org/whl"


def release(torch: str) -> TorchRelease | None:
    try:
        return _RELEASES.get(torch_minor(torch))
    except ValueError:
        return None


def wheel_cudas(torch: str) -> tuple[str, ...]:
    """The CUDA variants download.pytorch.org publishes for this torch (empty: unknown torch)."""
    rel = release(torch)
    return rel.wheel_cudas if rel else ()


def python_ok(torch: str, python: str) -> bool:
    rel = release(torch)
    if rel is None:
        return False
    py = vtuple(python)[:2]
    return vtuple(rel.python_min) <= py <= vtuple(rel.python_max)


def wheel_exists(torch: str, cuda: str, python: str | None = None) -> bool:
    return cuda in wheel_cudas(torch) and (python is None or python_ok(torch, python))


def expected_cudnn(torch: str) -> int:
    """The cuDNN major this torch's CUDA wheels are built against (9 from 2.4 on)."""
    return 9 if vtuple(torch)[:2] >= (2, 4) else 8


def official_images(torch: str) -> tuple[OfficialImage, ...]:
    rel = release(torch)
    return rel.images if rel else ()


def image_published(torch: str, cuda: str) -> bool:
    """Whether pytorch/pytorch publishes this torch minor on this CUDA (section 1)."""
    return any(img.cuda == cuda for img in official_images(torch))


def official_python(torch: str, cuda: str) -> str | None:
    """The Python of the pytorch/pytorch image of this torch and CUDA, where a source gave it."""
    return next(
        (i.python for i in official_images(torch) if i.cuda == cuda and i.torch == torch), None
    )


def official_tag(torch: str, cuda: str, cudnn: int, flavor: Flavor) -> str:
    """The pytorch/pytorch tag: "2.5.1-cuda12.4-cudnn9-runtime"."""
    return f"{torch}-cuda{cuda}-cudnn{cudnn}-{flavor}"


def official_image(torch: str, cuda: str, cudnn: int, flavor: Flavor) -> str:
    return f"{OFFICIAL_REPOSITORY}:{official_tag(torch, cuda, cudnn, flavor)}"


def latest_patch(torch: str) -> str:
    """The newest full version the tables know for this minor ("2.5" -> "2.5.1")."""
    minor = torch_minor(torch)
    known = [img.torch for img in official_images(minor)]
    known += [d.torch for d in DLC_IMAGES if torch_minor(d.torch) == minor]
    return max(known, key=vtuple) if known else f"{minor}.0"


# --- Section 2: minimum NVIDIA driver (Linux) ------------------------------------------


class DriverFloor(NamedTuple):
    cuda: str
    shipped_with: str  # the driver the toolkit ships with: the full feature set
    source: str = REFERENCE


DRIVER_FLOORS: tuple[DriverFloor, ...] = (
    DriverFloor("11.8", "520.61.05"),
    DriverFloor("12.1", "530.30.02"),
    DriverFloor("12.4", "550.54.14"),
    DriverFloor("12.6", "560.28.03"),
    DriverFloor("12.8", "570.26"),
    DriverFloor("12.9", "575.51.03"),
    DriverFloor("13.0", "580.65.06"),
    DriverFloor("13.1", "590.44.01"),
    DriverFloor("13.2", "595.45.04"),
    # The AWS DLC PyTorch 2.13 image's CUDA. 13.4 and later: no row (13.4 no longer bundles
    # a Linux driver; its floor could not be read here).
    DriverFloor(
        "13.3",
        "610.43.02",
        "docs.nvidia.com/cuda/archive/13.3.0/cuda-toolkit-release-notes (CUDA 13.3 GA and "
        f"Update 1: >= 610.43.02), as transcribed in several public repositories; read {READ}",
    ),
)
_SHIPPED = {row.cuda: row.shipped_with for row in DRIVER_FLOORS}

# Minor-version compatibility: any CUDA of a major runs (limited features, no PTX JIT)
# on a driver at or above the major's floor.
MINOR_COMPAT_FLOORS: dict[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580"}


def driver_floor(cuda: str, *, minor_compat: bool = False) -> str | None:
    """The lowest driver for this CUDA: the one it ships with, or with `minor_compat` the
    floor of its major. None: a CUDA the table does not know."""
    if minor_compat:
        return MINOR_COMPAT_FLOORS.get(vtuple(cuda)[0])
    return _SHIPPED.get(cuda)


def driver_supports(driver_version: str, cuda: str, *, minor_compat: bool = False) -> bool:
    floor = driver_floor(cuda, minor_compat=minor_compat)
    return floor is not None and vtuple(driver_version) >= vtuple(floor)


def max_cuda_for_driver(driver_version: str, *, minor_compat: bool = False) -> str | None:
    """The newest CUDA of the table this driver runs: with the full feature set, or with
    `minor_compat` also through minor-version compatibility (None: older than all)."""
    ok = [
        row.cuda
        for row in DRIVER_FLOORS
        if driver_supports(driver_version, row.cuda, minor_compat=minor_compat)
    ]
    return max(ok, key=vtuple) if ok else None


# --- Section 3: AWS Deep Learning Containers -------------------------------------------

DLC_ACCOUNT = "763104351884"
DLC_PUBLIC_REGISTRY = "public.ecr.aws/deep-learning-containers"
DLC_TRAINING_REPOSITORY = "pytorch-training"  # up to torch 2.10, Ubuntu
DLC_AL2023_REPOSITORY = "pytorch"  # from torch 2.11, Amazon Linux 2023
DLC_TAG = re.compile(
    r"^(\d+\.\d+(?:\.\d+)?)-gpu-(py3\d+)-(cu\d+)-(ubuntu\d+\.\d+)-(ec2|sagemaker)(-v\d+(?:\.\d+)*)?$"
)
DLC_AL2023_TAG = re.compile(
    r"^(\d+\.\d+(?:\.\d+)?)-(cu\d+)-(amzn\d+)(-sagemaker)?(-v\d+(?:\.\d+)*)?$"
)


class DlcImage(NamedTuple):
    repository: str
    tag: str  # the -ec2 variant; a -sagemaker one sits beside it
    torch: str
    cuda: str
    python: str | None  # the tag's (Ubuntu tags name it); the AL2023 rows: the image's
    end_of_support: str | None
    source: str = REFERENCE


# aws/deep-learning-containers at e0ecedea (2026-08-21): docs/src/data/pytorch/<v>-cuda-ec2.yml
# (tags, python, cuda, ga, eop). The newest PyTorch DLC there is 2.13; a 2.14 one is not in
# that snapshot (one public mention of a 2.14-cu133-amzn2023-sagemaker tag: not listed).
_DLC_DOCS = "github.com/aws/deep-learning-containers@e0ecedea docs/src/data/pytorch/{}-cuda-ec2.yml"


_UBUNTU = DLC_TRAINING_REPOSITORY
DLC_IMAGES: tuple[DlcImage, ...] = (
    DlcImage(_UBUNTU, "2.1.0-gpu-py310-cu121-ubuntu20.04-ec2", "2.1.0", "12.1", "3.10", None),
    DlcImage(_UBUNTU, "2.2.0-gpu-py310-cu121-ubuntu20.04-ec2", "2.2.0", "12.1", "3.10", None),
    DlcImage(_UBUNTU, "2.3.0-gpu-py311-cu121-ubuntu20.04-ec2", "2.3.0", "12.1", "3.11", None),
    DlcImage(_UBUNTU, "2.4.0-gpu-py311-cu124-ubuntu22.04-ec2", "2.4.0", "12.4", "3.11", None),
    DlcImage(_UBUNTU, "2.5.1-gpu-py311-cu124-ubuntu22.04-ec2", "2.5.1", "12.4", "3.11", None),
    DlcImage(
        _UBUNTU, "2.6.0-gpu-py312-cu126-ubuntu22.04-ec2", "2.6.0", "12.6", "3.12", "2026-01-29"
    ),
    DlcImage(
        _UBUNTU, "2.7.1-gpu-py312-cu128-ubuntu22.04-ec2", "2.7.1", "12.8", "3.12", "2026-04-23"
    ),
    DlcImage(
        _UBUNTU, "2.8.0-gpu-py312-cu129-ubuntu22.04-ec2", "2.8.0", "12.9", "3.12", "2026-08-06"
    ),
    DlcImage(
        _UBUNTU, "2.9.0-gpu-py312-cu130-ubuntu22.04-ec2", "2.9.0", "13.0", "3.12", "2026-10-15"
    ),
    DlcImage(
        _UBUNTU, "2.10.0-gpu-py313-cu130-ubuntu22.04-ec2", "2.10.0", "13.0", "3.13", "2027-01-21"
    ),
    DlcImage(
        "pytorch",
        "2.11.0-cu130-amzn2023",
        "2.11.0",
        "13.0",
        "3.12",
        "2027-04-30",
        _DLC_DOCS.format("2.11") + f"; read {READ}",
    ),
    DlcImage(
        "pytorch",
        "2.12.1-cu130-amzn2023",
        "2.12.1",
        "13.0",
        "3.12",
        "2027-07-02",
        _DLC_DOCS.format("2.12") + f"; read {READ}",
    ),
    DlcImage(
        "pytorch",
        "2.13.0-cu133-amzn2023",
        "2.13.0",
        "13.3",
        "3.12",
        "2027-07-20",
        _DLC_DOCS.format("2.13") + f" and .github/config/image/pytorch/2.13-ec2-cuda.yml "
        f"(cuda_version 13.3.0, python_version 3.12); read {READ}",
    ),
)


class DlcTag(NamedTuple):
    torch: str
    cuda: str
    python: str | None
    os: str
    platform: Literal["ec2", "sagemaker"]


def parse_dlc_tag(tag: str) -> DlcTag | None:
    """Either DLC tag form -> its parts; None when the tag is neither."""
    if m := DLC_TAG.match(tag):
        torch, py, cu, os_, platform = m.groups()[:5]
        where = "sagemaker" if platform == "sagemaker" else "ec2"  # the tag's (ec2|sagemaker)
        return DlcTag(torch, cuda_from_cu(cu), f"3.{py[3:]}", os_, where)
    if m := DLC_AL2023_TAG.match(tag):
        torch, cu, os_, sagemaker = m.groups()[:4]
        return DlcTag(torch, cuda_from_cu(cu), None, os_, "sagemaker" if sagemaker else "ec2")
    return None


def dlc_python(torch: str, cuda: str) -> str | None:
    """The Python of the DLC of this torch minor and CUDA (the AL2023 tags do not name it)."""
    return next(
        (
            d.python
            for d in DLC_IMAGES
            if torch_minor(d.torch) == torch_minor(torch) and d.cuda == cuda
        ),
        None,
    )


def dlc_efa_image(torch: str | None) -> str | None:
    """The public AWS DLC PyTorch image of this torch (the newest listed for its minor):
    the documented EFA variant of the trainer image, since AWS's DLC GPU images ship the
    EFA installer's libfabric and aws-ofi-nccl (aws/deep-learning-containers: every
    PyTorch GPU Dockerfile runs the EFA installer). None: no DLC of that torch."""
    if not torch:
        return None
    try:
        minor = torch_minor(torch)
    except ValueError:
        return None
    found = [d for d in DLC_IMAGES if torch_minor(d.torch) == minor]
    if not found:
        return None
    best = max(found, key=lambda d: vtuple(d.torch))
    return f"{DLC_PUBLIC_REGISTRY}/{best.repository}:{best.tag}"


# --- Section 4: which CUDA a GPU runs (the GPUs: catalog/instances.py) ------------


def cuda_problem_for_gpu(cuda: str, gpu_name: str) -> Literal["too_old", "too_new"] | None:
    spec = gpu(gpu_name)
    if spec.min_cuda and vtuple(cuda) < vtuple(spec.min_cuda):
        return "too_old"
    if spec.max_cuda and vtuple(cuda) > vtuple(spec.max_cuda):
        return "too_new"
    return None


def cuda_ok_for_gpu(cuda: str, gpu_name: str) -> bool:
    return cuda_problem_for_gpu(cuda, gpu_name) is None


# --- The nearest valid combination ------------------------------------------------------


class Combo(NamedTuple):
    torch: str
    cuda: str
    cudnn: int
    tag: str | None  # the image tag for source="official"/"dlc"; None for a bare wheel


Source = Literal["wheel", "official", "dlc"]


def _candidates(source: Source, flavor: Flavor, dlc_repository: str) -> list[Combo]:
    if source == "official":
        return [
            Combo(i.torch, i.cuda, i.cudnn, official_tag(i.torch, i.cuda, i.cudnn, flavor))
            for r in TORCH_RELEASES
            for i in r.images
        ]
    if source == "dlc":
        return [
            Combo(d.torch, d.cuda, expected_cudnn(d.torch), d.tag)
            for d in DLC_IMAGES
            if d.repository == dlc_repository
        ]
    return [
        Combo(latest_patch(r.minor), c, expected_cudnn(r.minor), None)
        for r in TORCH_RELEASES
        for c in r.wheel_cudas
    ]


def _avoided(combo: Combo, avoid: frozenset[str]) -> bool:
    return combo.tag is not None and any(
        a == combo.tag or a.endswith(":" + combo.tag) for a in avoid
    )


def nearest_valid(
    torch: str | None,
    *,
    source: Source = "wheel",
    gpu_name: str | None = None,
    driver_version: str | None = None,
    python: str | None = None,
    flavor: Flavor = "runtime",
    dlc_repository: str = DLC_TRAINING_REPOSITORY,
    avoid: frozenset[str] = frozenset(),
) -> Combo | None:
    """The valid combination nearest the user's torch: the same torch minor when any of its
    CUDAs fits (the GPU, the driver, the Python, not in `avoid`), else the closest minor
    (newer on a tie). Within a minor, a CUDA the driver runs with full features comes
    first, then one it runs through minor-version compatibility (valid, with a warning):
    keeping the user's torch beats a driver's full feature set. Then the newest CUDA."""

    def fits(c: Combo) -> bool:
        return (
            (gpu_name is None or cuda_ok_for_gpu(c.cuda, gpu_name))
            and (
                driver_version is None or driver_supports(driver_version, c.cuda, minor_compat=True)
            )
            and (python is None or source != "wheel" or python_ok(c.torch, python))
            and not _avoided(c, avoid)
        )

    ok = [c for c in _candidates(source, flavor, dlc_repository) if fits(c)]
    if not ok:
        return None
    want = vtuple(torch)[:2] if torch else (99, 0)
    keep_patch = torch if torch and len(vtuple(torch)) >= 3 and source == "wheel" else None

    def rank(c: Combo) -> tuple:
        minor = vtuple(c.torch)[:2]
        distance = abs((minor[0] - want[0]) * 100 + minor[1] - want[1])
        limited = driver_version is not None and not driver_supports(driver_version, c.cuda)
        return (distance, limited, tuple(-p for p in minor), tuple(-p for p in vtuple(c.cuda)))

    best = min(ok, key=rank)
    if keep_patch and torch_minor(keep_patch) == torch_minor(best.torch):
        best = best._replace(torch=keep_patch.split("+")[0])  # keep the user's exact pin
    return best


def newest_official_image(
    torch: str | None, *, drivers: Sequence[str] = (), gpus: Sequence[str] = ()
) -> OfficialImage | None:
    """The pytorch/pytorch image a rebuild for these nodes takes: of `torch`'s minor when
    one runs on every driver (minor-version compatibility counts: the CUDA gate's rule)
    and GPU, else of the nearest torch minor that has one (newer on a tie); of that torch,
    the newest CUDA. None: no image in the table runs here."""

    def runs(cuda: str) -> bool:
        return all(driver_supports(d, cuda, minor_compat=True) for d in drivers) and all(
            cuda_ok_for_gpu(cuda, g) for g in gpus
        )

    images = [i for r in TORCH_RELEASES for i in r.images if runs(i.cuda)]
    if not images:
        return None
    want = vtuple(torch)[:2] if torch else (99, 0)

    def rank(image: OfficialImage) -> tuple:
        minor = vtuple(image.torch)[:2]
        distance = abs((minor[0] - want[0]) * 100 + minor[1] - want[1])
        return (
            distance,
            tuple(-p for p in minor),
            tuple(-p for p in vtuple(image.cuda)),
            tuple(-p for p in vtuple(image.torch)),
        )

    return min(images, key=rank)
