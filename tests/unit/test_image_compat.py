"""Every row of the compatibility tables (skills/catalog/cuda.py) against the value
the reference (CUDA-AND-FAILURES.md sections 1-4) gives, written out here independently."""

from __future__ import annotations

import pytest

from skills.catalog import cuda as cuda_tables
from skills.catalog import instances
from skills.shared.errors import ErrorCode, ToolFailure

# Section 1: torch minor -> (python range, wheel CUDA tags, published image tags).
WHEELS = [
    ("2.1.2", "3.8", "3.11", "cu118 cu121", "2.1.2-cuda11.8-cudnn8-runtime"),
    ("2.2.1", "3.8", "3.11", "cu118 cu121", None),
    ("2.3.1", "3.8", "3.11", "cu118 cu121", "2.3.1-cuda12.1-cudnn8-devel"),
    ("2.4.1", "3.8", "3.12", "cu118 cu121 cu124", "2.4.1-cuda12.4-cudnn9-runtime"),
    ("2.5.1", "3.9", "3.12", "cu118 cu121 cu124", "2.5.1-cuda12.4-cudnn9-runtime"),
    ("2.6.0", "3.9", "3.13", "cu118 cu124 cu126", "2.6.0-cuda12.6-cudnn9-runtime"),
    ("2.7.1", "3.9", "3.13", "cu118 cu126 cu128", "2.7.1-cuda12.8-cudnn9-runtime"),
    ("2.8.0", "3.9", "3.13", "cu126 cu128 cu129", "2.8.0-cuda12.9-cudnn9-runtime"),
    ("2.9.1", "3.10", "3.14", "cu126 cu128 cu130", "2.9.1-cuda13.0-cudnn9-runtime"),
    ("2.10.0", "3.10", "3.14", "cu126 cu128 cu130", "2.10.0-cuda13.0-cudnn9-runtime"),
    ("2.11.0", "3.10", "3.14", "cu126 cu128 cu130", "2.11.0-cuda12.8-cudnn9-runtime"),
    ("2.12.0", "3.10", "3.14", "cu126 cu130 cu132", "2.12.0-cuda13.0-cudnn9-runtime"),
    ("2.13.0", "3.10", "3.15", "cu126 cu130 cu132", "2.13.0-cuda13.2-cudnn9-devel"),
    ("2.14.0", "3.10", "3.15", "cu126 cu130 cu132", "2.14.0-cuda12.6-cudnn9-runtime"),
    ("2.15.0", "3.10", "3.15", "cu130 cu132", "2.15.0-cuda13.0-cudnn9-runtime"),
]


@pytest.mark.parametrize(
    ("torch", "py_min", "py_max", "cus", "tag"), WHEELS, ids=[w[0] for w in WHEELS]
)
def test_torch_release_row(torch: str, py_min: str, py_max: str, cus: str, tag: str | None):
    assert [cuda_tables.cu_tag(c) for c in cuda_tables.wheel_cudas(torch)] == cus.split()
    assert cuda_tables.python_ok(torch, py_min) and cuda_tables.python_ok(torch, py_max)
    below = f"3.{int(py_min.split('.')[1]) - 1}"
    above = f"3.{int(py_max.split('.')[1]) + 1}"
    assert not cuda_tables.python_ok(torch, below) and not cuda_tables.python_ok(torch, above)
    published = {
        cuda_tables.official_tag(i.torch, i.cuda, i.cudnn, f)
        for i in cuda_tables.official_images(torch)
        for f in ("runtime", "devel")
    }
    if tag is None:
        assert not published
    else:
        assert tag in published


def test_table_covers_every_release_listed():
    assert [r.minor for r in cuda_tables.TORCH_RELEASES] == [w[0].rsplit(".", 1)[0] for w in WHEELS]


# Every pytorch/pytorch image of torch 2.11-2.15, written out from the sources the table
# cites (issue 51, read 2026-12-06): tag, CUDA, Python (None: not read), minimum driver
# (the CUDA's own; a 13.x image also runs from 580 through minor-version compatibility).
IMAGES_2_11_ON = [
    ("2.11.0-cuda12.6-cudnn9", "12.6", None, "560.28.03"),
    ("2.11.0-cuda12.8-cudnn9", "12.8", None, "570.26"),
    ("2.11.0-cuda13.0-cudnn9", "13.0", None, "580.65.06"),
    ("2.12.0-cuda12.6-cudnn9", "12.6", None, "560.28.03"),
    ("2.12.0-cuda13.0-cudnn9", "13.0", None, "580.65.06"),
    ("2.12.0-cuda13.2-cudnn9", "13.2", None, "595.45.04"),
    ("2.12.1-cuda12.6-cudnn9", "12.6", None, "560.28.03"),
    ("2.13.0-cuda12.6-cudnn9", "12.6", None, "560.28.03"),
    ("2.13.0-cuda13.0-cudnn9", "13.0", None, "580.65.06"),
    ("2.13.0-cuda13.2-cudnn9", "13.2", None, "595.45.04"),
    ("2.14.0-cuda12.6-cudnn9", "12.6", "3.12", "560.28.03"),
    ("2.14.0-cuda13.0-cudnn9", "13.0", "3.12", "580.65.06"),
    ("2.14.0-cuda13.2-cudnn9", "13.2", "3.12", "595.45.04"),
    ("2.15.0-cuda13.0-cudnn9", "13.0", None, "580.65.06"),
    ("2.15.0-cuda13.2-cudnn9", "13.2", None, "595.45.04"),
]


@pytest.mark.parametrize(("tag", "cuda", "python", "driver"), IMAGES_2_11_ON, ids=lambda v: v)
def test_every_image_of_torch_2_11_on(tag: str, cuda: str, python: str | None, driver: str):
    torch = tag.split("-")[0]
    assert cuda_tables.image_published(torch, cuda)
    assert cuda_tables.official_python(torch, cuda) == python
    assert cuda_tables.driver_floor(cuda) == driver
    for flavor in ("runtime", "devel"):
        assert cuda_tables.official_tag(torch, cuda, 9, flavor) == f"{tag}-{flavor}"


def test_no_image_of_torch_2_11_on_beyond_the_list():
    listed = {
        f"{i.torch}-cuda{i.cuda}-cudnn{i.cudnn}"
        for r in cuda_tables.TORCH_RELEASES
        if cuda_tables.vtuple(r.minor) >= (2, 11)
        for i in r.images
    }
    assert listed == {row[0] for row in IMAGES_2_11_ON}


def test_every_row_added_for_issue_51_names_its_source_and_the_day_it_was_read():
    rows = [r for r in cuda_tables.TORCH_RELEASES if cuda_tables.vtuple(r.minor) >= (2, 11)]
    rows += [r for r in cuda_tables.DRIVER_FLOORS if r.cuda == "13.3"]
    rows += [d for d in cuda_tables.DLC_IMAGES if d.repository == "pytorch"]
    for row in rows:
        assert cuda_tables.READ in row.source, row


# Section 2: CUDA -> driver it ships with; the minor-version floors per major.
DRIVERS = [
    ("11.8", "520.61.05", "450.80.02"),
    ("12.1", "530.30.02", "525.60.13"),
    ("12.4", "550.54.14", "525.60.13"),
    ("12.6", "560.28.03", "525.60.13"),
    ("12.8", "570.26", "525.60.13"),
    ("12.9", "575.51.03", "525.60.13"),
    ("13.0", "580.65.06", "580"),
    ("13.1", "590.44.01", "580"),
    ("13.2", "595.45.04", "580"),
    ("13.3", "610.43.02", "580"),
]


@pytest.mark.parametrize(("cuda", "shipped", "floor"), DRIVERS, ids=[d[0] for d in DRIVERS])
def test_driver_row(cuda: str, shipped: str, floor: str):
    assert cuda_tables.driver_floor(cuda) == shipped
    assert cuda_tables.driver_floor(cuda, minor_compat=True) == floor
    assert cuda_tables.max_cuda_for_driver(shipped) == cuda
    assert cuda_tables.driver_supports(shipped, cuda)


def test_driver_rows_complete_and_lookups_at_the_edges():
    assert [r.cuda for r in cuda_tables.DRIVER_FLOORS] == [d[0] for d in DRIVERS]
    assert cuda_tables.max_cuda_for_driver("470.57.02") is None
    assert cuda_tables.max_cuda_for_driver("570.86.10") == "12.8"
    assert not cuda_tables.driver_supports("550.54.15", "12.8")
    assert cuda_tables.driver_supports("550.54.15", "12.8", minor_compat=True)


# Section 3: DLC tags per torch.
DLCS = [
    ("2.1.0", "pytorch-training", "2.1.0-gpu-py310-cu121-ubuntu20.04-ec2", "12.1", "3.10"),
    ("2.2.0", "pytorch-training", "2.2.0-gpu-py310-cu121-ubuntu20.04-ec2", "12.1", "3.10"),
    ("2.3.0", "pytorch-training", "2.3.0-gpu-py311-cu121-ubuntu20.04-ec2", "12.1", "3.11"),
    ("2.4.0", "pytorch-training", "2.4.0-gpu-py311-cu124-ubuntu22.04-ec2", "12.4", "3.11"),
    ("2.5.1", "pytorch-training", "2.5.1-gpu-py311-cu124-ubuntu22.04-ec2", "12.4", "3.11"),
    ("2.6.0", "pytorch-training", "2.6.0-gpu-py312-cu126-ubuntu22.04-ec2", "12.6", "3.12"),
    ("2.7.1", "pytorch-training", "2.7.1-gpu-py312-cu128-ubuntu22.04-ec2", "12.8", "3.12"),
    ("2.8.0", "pytorch-training", "2.8.0-gpu-py312-cu129-ubuntu22.04-ec2", "12.9", "3.12"),
    ("2.9.0", "pytorch-training", "2.9.0-gpu-py312-cu130-ubuntu22.04-ec2", "13.0", "3.12"),
    ("2.10.0", "pytorch-training", "2.10.0-gpu-py313-cu130-ubuntu22.04-ec2", "13.0", "3.13"),
    ("2.11.0", "pytorch", "2.11.0-cu130-amzn2023", "13.0", "3.12"),
    ("2.12.1", "pytorch", "2.12.1-cu130-amzn2023", "13.0", "3.12"),
    ("2.13.0", "pytorch", "2.13.0-cu133-amzn2023", "13.3", "3.12"),
]


@pytest.mark.parametrize(("torch", "repo", "tag", "cuda", "python"), DLCS, ids=[d[0] for d in DLCS])
def test_dlc_row(torch: str, repo: str, tag: str, cuda: str, python: str | None):
    row = next(d for d in cuda_tables.DLC_IMAGES if d.torch == torch)
    assert (row.repository, row.tag) == (repo, tag)
    parsed = cuda_tables.parse_dlc_tag(tag)
    assert parsed is not None
    assert (parsed.torch, parsed.cuda) == (torch, cuda)
    assert parsed.python in (python, None)  # the AL2023 tags do not name it
    assert (row.cuda, row.python) == (cuda, python)
    assert cuda_tables.dlc_python(torch, cuda) == python


@pytest.mark.parametrize(
    "tag", ["2.5.1-gpu-py311-cu124-ubuntu22.04-sagemaker-v1.2", "2.13.0-cu133-amzn2023-sagemaker"]
)
def test_dlc_sagemaker_variants_parse(tag: str):
    parsed = cuda_tables.parse_dlc_tag(tag)
    assert parsed is not None and parsed.platform == "sagemaker"


def test_dlc_rejects_other_tags():
    assert cuda_tables.parse_dlc_tag("2.5.1-cuda12.4-cudnn9-runtime") is None


# Section 4: GPU -> sm, the CUDAs that run on it.
GPU_ROWS = [
    ("T4", 75, "10.0", None),
    ("A100", 80, "11.0", None),
    ("A10G", 86, "11.1", None),
    ("L4", 89, "11.8", None),
    ("L40S", 89, "11.8", None),
    ("H100", 90, "11.8", None),
    ("H200", 90, "11.8", None),
    ("B200", 100, "12.8", None),
    ("RTX PRO 6000", 120, "12.8", None),
    ("V100", 70, None, "12.6"),
]


@pytest.mark.parametrize(
    ("name", "sm", "lowest", "highest"), GPU_ROWS, ids=[g[0] for g in GPU_ROWS]
)
def test_gpu_row(name: str, sm: int, lowest: str | None, highest: str | None):
    assert instances.gpu(name).sm == sm
    if lowest:
        assert cuda_tables.cuda_ok_for_gpu(lowest, name)
        major, minor = (int(p) for p in lowest.split("."))
        older = f"{major}.{minor - 1}" if minor else f"{major - 1}.8"
        assert cuda_tables.cuda_problem_for_gpu(older, name) == "too_old"
    if highest:
        assert cuda_tables.cuda_ok_for_gpu(highest, name)
        assert cuda_tables.cuda_problem_for_gpu("12.8", name) == "too_new"
        assert cuda_tables.cuda_problem_for_gpu("13.0", name) == "too_new"
    else:
        assert cuda_tables.cuda_ok_for_gpu("13.2", name)


INSTANCE_ROWS = [
    ("p4d.24xlarge", "A100", 8, 40, 4, 21.96),
    ("p4de.24xlarge", "A100", 8, 80, 4, 27.45),
    ("p5.48xlarge", "H100", 8, 80, 32, 55.04),
    ("p5.4xlarge", "H100", 1, 80, None, 6.88),
    ("p5e.48xlarge", "H200", 8, 141, 32, None),
    ("p5en.48xlarge", "H200", 8, 141, 16, 63.30),
    ("p6-b200.48xlarge", "B200", 8, 179, 8, 113.93),
    ("g5.xlarge", "A10G", 1, 22, 0, 1.006),
    ("g5.2xlarge", "A10G", 1, 22, 0, 1.212),
    ("g5.4xlarge", "A10G", 1, 22, 0, 1.624),
    ("g5.8xlarge", "A10G", 1, 22, None, 2.448),
    ("g5.16xlarge", "A10G", 1, 22, None, 4.096),
    ("g5.12xlarge", "A10G", 4, 22, 1, 5.672),
    ("g5.24xlarge", "A10G", 4, 22, 1, 8.144),
    ("g5.48xlarge", "A10G", 8, 22, 1, 16.288),
    ("g6.xlarge", "L4", 1, 22, 0, 0.805),
    ("g6.2xlarge", "L4", 1, 22, 0, 0.978),
    ("g6.4xlarge", "L4", 1, 22, 0, 1.323),
    ("g6.12xlarge", "L4", 4, 22, None, 4.602),
    ("g6.24xlarge", "L4", 4, 22, None, 6.675),
    ("g6.48xlarge", "L4", 8, 22, None, 13.350),
    ("g6e.xlarge", "L40S", 1, 44, 0, 1.861),
    ("g6e.2xlarge", "L40S", 1, 44, 0, 2.242),
    ("g6e.4xlarge", "L40S", 1, 44, 0, 3.004),
    ("g6e.12xlarge", "L40S", 4, 44, 1, 10.493),
    ("g6e.24xlarge", "L40S", 4, 44, 2, 15.066),
    ("g6e.48xlarge", "L40S", 8, 44, 4, 30.131),
    ("p3.2xlarge", "V100", 1, 16, 0, None),
    ("p3.8xlarge", "V100", 4, 16, 0, None),
    ("p3.16xlarge", "V100", 8, 16, 0, None),
    ("p3dn.24xlarge", "V100", 8, 32, 1, None),
]


@pytest.mark.parametrize(
    ("name", "gpu", "count", "gib", "efa", "price"),
    INSTANCE_ROWS,
    ids=[i[0] for i in INSTANCE_ROWS],
)
def test_instance_row(
    name: str, gpu: str, count: int, gib: int, efa: int | None, price: float | None
):
    spec = instances.instance_spec(name)
    assert (spec.gpu, spec.gpus, spec.gib_per_gpu, spec.efa_devices, spec.usd_per_hour) == (
        gpu,
        count,
        gib,
        efa,
        price,
    )
    assert spec.efa == (efa != 0)  # None: "yes" without a count
    assert instances.instance_spec(f"ml.{name}") == spec  # SageMaker names, same hardware
    assert instances.gpu_for_instance(name).name == gpu


def test_instance_rows_complete():
    assert sorted(i.name for i in instances.INSTANCES) == sorted(r[0] for r in INSTANCE_ROWS)


def test_unknown_instance_is_invalid_input_with_known_names():
    with pytest.raises(ToolFailure) as err:
        instances.instance_spec("p9.mega")
    assert err.value.code == ErrorCode.INVALID_INPUT
    assert "p5.48xlarge" in err.value.hint and "p6-b200.48xlarge" in err.value.hint


# nearest_valid: the user's torch kept when a CUDA fits; the newest CUDA preferred.
NEAREST = [
    ({"torch": "2.5.1", "source": "official"}, ("2.5.1", "12.4", "2.5.1-cuda12.4-cudnn9-runtime")),
    ({"torch": "2.7.1", "source": "wheel", "gpu_name": "V100"}, ("2.7.1", "12.6", None)),
    (
        {"torch": "2.7.1", "source": "official", "gpu_name": "V100"},
        ("2.6.0", "12.6", "2.6.0-cuda12.6-cudnn9-runtime"),
    ),
    (
        {"torch": "2.13.0", "source": "official", "driver_version": "590.0"},
        ("2.13.0", "13.0", "2.13.0-cuda13.0-cudnn9-runtime"),
    ),
    (
        {
            "torch": "2.13.0",
            "source": "official",
            "flavor": "devel",
            "avoid": frozenset({"pytorch/pytorch:2.13.0-cuda13.2-cudnn9-devel"}),
        },
        ("2.13.0", "13.0", "2.13.0-cuda13.0-cudnn9-devel"),
    ),
    ({"torch": "2.5.1", "source": "wheel", "gpu_name": "B200"}, ("2.7.1", "12.8", None)),
    # 585 runs CUDA 13.3 only through minor-version compatibility: valid (a warning), and
    # keeping the user's torch comes first.
    (
        {"torch": "2.13.0", "source": "dlc", "dlc_repository": "pytorch", "driver_version": "585"},
        ("2.13.0", "13.3", "2.13.0-cu133-amzn2023"),
    ),
    (
        {"torch": "2.13.0", "source": "wheel", "driver_version": "535.104.05"},
        ("2.13.0", "12.6", None),
    ),
    # 2.13.0 has a CUDA 12.6 image: a 535 (12.x) driver keeps torch 2.13 (it used to be
    # told to drop to 2.11).
    (
        {"torch": "2.13.0", "source": "official", "driver_version": "535.104.05"},
        ("2.13.0", "12.6", "2.13.0-cuda12.6-cudnn9-runtime"),
    ),
    (
        {"torch": "2.14.0", "source": "official", "driver_version": "570.86.10"},
        ("2.14.0", "12.6", "2.14.0-cuda12.6-cudnn9-runtime"),
    ),
]


@pytest.mark.parametrize(("kwargs", "expected"), NEAREST, ids=[str(i) for i in range(len(NEAREST))])
def test_nearest_valid(kwargs: dict, expected: tuple):
    torch = kwargs.pop("torch")
    combo = cuda_tables.nearest_valid(torch, **kwargs)
    assert combo is not None and (combo.torch, combo.cuda, combo.tag) == expected


def test_nearest_valid_none_when_nothing_fits():
    assert (
        cuda_tables.nearest_valid(
            "2.13.0", source="wheel", gpu_name="B200", driver_version="450.80.02"
        )
        is None
    )
