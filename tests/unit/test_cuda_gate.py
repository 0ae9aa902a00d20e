"""The driver/CUDA gate before a PyTorchJob is submitted: decisions from the image's
labels and the nodes' facts (read through skills.kube.gpu_nodes, as from the API)."""

from __future__ import annotations

import pytest

from skills.kube.gpu_nodes import node_gpu_facts
from skills.shared.errors import ToolFailure
from skills.training_job_deployer import cuda_gate


def node(instance_type: str, driver: str | None, gpus: int = 8, sm: tuple[int, int] | None = None):
    labels = {"node.kubernetes.io/instance-type": instance_type}
    if driver:
        labels["nvidia.com/cuda.driver-version.full"] = driver
    if sm:
        labels["nvidia.com/gpu.compute.major"], labels["nvidia.com/gpu.compute.minor"] = map(
            str, sm
        )
    return node_gpu_facts(
        {
            "metadata": {"name": f"n-{instance_type}-{driver}", "labels": labels},
            "status": {
                "allocatable": {"nvidia.com/gpu": str(gpus)},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }
    )


CU130 = cuda_gate.image_cuda({"fsdp-eks.torch": "2.13.0", "fsdp-eks.cuda": "13.0"})


def test_labels_give_the_images_torch_and_cuda():
    assert CU130 == cuda_gate.ImageCuda("2.13.0", "13.0")
    assert cuda_gate.image_cuda({}) is None
    assert cuda_gate.image_cuda({"fsdp-eks.cuda": "thirteen"}) is None


def test_a_cu130_image_on_a_535_driver_is_refused_with_the_fix():
    result = cuda_gate.check(CU130, [node("p5.48xlarge", "535.104.05")], "p5.48xlarge")
    assert [p["problem"] for p in result.problems] == ["driver_too_old"]
    assert result.problems[0]["max_cuda"] == "12.1"
    # The fix: the official image nearest torch 2.13 that driver 535 runs (CUDA 12.x).
    assert result.fix is not None
    assert result.fix.startswith("python commands/build_image.py --base_image pytorch/pytorch:")
    base = result.fix.split("--base_image ")[1].split()[0]
    assert "-cuda12." in base
    assert "--driver_version 535.104.05" in result.fix
    assert "--instance_type p5.48xlarge" in result.fix
    with pytest.raises(ToolFailure) as caught:
        cuda_gate.enforce(result, "img:1")
    failure = caught.value
    assert failure.code == "cuda_incompatible"
    assert result.fix in failure.hint and "skip_gate" in failure.hint
    assert failure.details["problems"][0]["driver_version"] == "535.104.05"


def test_a_matching_pair_passes():
    result = cuda_gate.check(CU130, [node("p5.48xlarge", "580.65.06")], "p5.48xlarge")
    assert result.problems == [] and result.warnings == [] and result.fix is None
    cuda_gate.enforce(result, "img:1")  # no raise
    cu126 = cuda_gate.ImageCuda("2.6.0", "12.6")
    assert cuda_gate.check(cu126, [node("p4d.24xlarge", "560.35.03")]).problems == []


def test_minor_version_compatibility_is_not_refused():
    # CUDA 12.8 on a 550 driver runs through minor-version compatibility (12.x >= 525.60).
    image = cuda_gate.ImageCuda("2.7.1", "12.8")
    assert cuda_gate.check(image, [node("p4d.24xlarge", "550.54.15")]).problems == []


def test_an_unsupported_gpu_architecture_is_refused():
    # V100 (sm_70): CUDA 13 dropped it.
    result = cuda_gate.check(CU130, [node("p3.16xlarge", "580.65.06")], "p3.16xlarge")
    assert [p["problem"] for p in result.problems] == ["cuda_too_new_for_gpu"]
    assert "-cuda12." in (result.fix or "")
    # Known from the compute capability alone when the node's instance type is unknown.
    by_sm = cuda_gate.check(CU130, [node("custom.box", "580.65.06", sm=(7, 0))])
    assert [p["gpu"] for p in by_sm.problems] == ["V100"]


def test_only_nodes_of_the_jobs_instance_type_count():
    nodes = [node("p5.48xlarge", "580.65.06"), node("g5.12xlarge", "535.104.05", gpus=4)]
    assert cuda_gate.check(CU130, nodes, "p5.48xlarge").problems == []
    assert cuda_gate.check(CU130, nodes, "g5.12xlarge").problems


def test_what_cannot_be_known_is_a_warning_not_a_refusal():
    assert cuda_gate.check(None, [node("p5.48xlarge", "535.104.05")]).warnings
    no_nodes = cuda_gate.check(CU130, [], "p5.48xlarge")
    assert no_nodes.problems == [] and "autoscaler" in no_nodes.warnings[0]
    unlabelled = cuda_gate.check(CU130, [node("p5.48xlarge", None)])
    assert unlabelled.problems == [] and "driver" in unlabelled.warnings[0]
