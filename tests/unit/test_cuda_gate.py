"""The driver/CUDA gate before a PyTorchJob is submitted: decisions from the image's
labels and the nodes' facts (read through skills.kube.gpu_nodes, as from the API)."""

from __future__ import annotations

import pytest

from skills.kube.gpu_nodes import node_gpu_facts
from skills.shared.errors import ToolFailure
from skills.training_job_deployer.targets.kubernetes import cuda_gate


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
    problem = result.problems[0]
    assert (problem["max_cuda"], problem["max_cuda_full_features"]) == ("12.9", "12.1")
    # The fix is one build_image call: the official image nearest torch 2.13 on the newest
    # CUDA driver 535 runs (2.13 has a CUDA 12.6 image, issue 51), plus the driver and
    # instance type so the build checks them.
    step = result.next_step
    assert step is not None and step.tool == "build_image"
    assert step.arguments == {
        "base_image": "pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime",
        "driver_version": "535.104.05",
        "instance_type": "p5.48xlarge",
    }
    fix = step.cli_line()
    assert result.fix == fix
    assert fix.startswith("build-image --base_image pytorch/pytorch:")
    with pytest.raises(ToolFailure) as caught:
        cuda_gate.enforce(result, "img:1")
    failure = caught.value
    assert failure.code == "cuda_incompatible" and failure.next_step == step
    assert fix in failure.hint and "skip_gate" in failure.hint
    assert failure.details["problems"][0]["driver_version"] == "535.104.05"


def test_the_message_and_the_remedy_agree_on_what_the_driver_runs():
    # Issue 21: "newest it runs: 12.4" beside a 12.8 suggestion. Both now name the same
    # rule (minor-version compatibility, the gate's own), and the torch change is said.
    result = cuda_gate.check(CU130, [node("p4d.24xlarge", "550.127.08")], "p4d.24xlarge")
    message = result.problems[0]["message"]
    assert "newest it runs: 12.9 through minor-version compatibility, 12.4 with every" in message
    step = result.next_step
    assert step is not None
    # torch 2.13 has a CUDA 12.6 image (issue 51): the remedy keeps the torch.
    assert step.arguments["base_image"] == "pytorch/pytorch:2.13.0-cuda12.6-cudnn9-runtime"
    assert "torch changes" not in step.why
    assert "CUDA 12.6: the newest CUDA driver 550.127.08 runs among torch 2.13's images" in (
        step.why
    )
    # The image the remedy builds passes this gate on these nodes.
    rebuilt = cuda_gate.ImageCuda("2.13.0", "12.6")
    assert cuda_gate.check(rebuilt, [node("p4d.24xlarge", "550.127.08")]).problems == []


def test_the_requested_torch_is_kept_when_its_image_runs_there():
    # torch 2.7 on CUDA 13.0 (a hand-made image): 2.7 has a 12.8 image that 550 runs.
    image = cuda_gate.ImageCuda("2.7.1", "13.0")
    result = cuda_gate.check(image, [node("p4d.24xlarge", "550.127.08")], "p4d.24xlarge")
    step = result.next_step
    assert step is not None
    assert step.arguments["base_image"] == "pytorch/pytorch:2.7.1-cuda12.8-cudnn9-runtime"
    assert "torch changes" not in step.why
    # Older than every CUDA in the table: nothing to build, and the hint says so.
    none = cuda_gate.check(CU130, [node("p4d.24xlarge", "418.40.04")], "p4d.24xlarge")
    assert none.problems and none.next_step is None
    with pytest.raises(ToolFailure) as caught:
        cuda_gate.enforce(none, "img:1")
    assert caught.value.next_step is None and "pick other nodes" in caught.value.hint


def test_a_matching_pair_passes():
    efa_image = cuda_gate.ImageCuda("2.13.0", "13.0", efa=True)
    result = cuda_gate.check(efa_image, [node("p5.48xlarge", "580.65.06")], "p5.48xlarge")
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
    assert result.next_step is not None
    assert "-cuda12." in result.next_step.arguments["base_image"]
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


def test_the_gate_needs_no_image_read_without_gpu_nodes():
    # No GPU node to check against: a warning, and the (unreachable) image is not read.
    cpu = node_gpu_facts({"metadata": {"name": "cpu", "labels": {}}, "status": {}})
    result = cuda_gate.gate("localhost:9/unreadable:v1", [cpu], "p5.48xlarge")
    assert result.problems == [] and "autoscaler" in result.warnings[0]


def test_an_unreadable_image_on_gpu_nodes_is_refused_not_warned():
    with pytest.raises(ToolFailure) as caught:
        cuda_gate.gate("localhost:9/unreadable:v1", [node("p5.48xlarge", "580.65.06")],
                       "p5.48xlarge")  # fmt: skip
    failure = caught.value
    assert failure.code == "cuda_unverified"
    assert "could not be read" in failure.message and "skip_gate=true" in failure.hint


# --- EFA (issue 29): the fsdp-eks.efa label build_image sets --------------------------------


def test_an_image_without_efa_on_an_efa_instance_is_flagged_with_the_dlc_rebuild():
    labels = {"fsdp-eks.torch": "2.13.0", "fsdp-eks.cuda": "13.0", "fsdp-eks.efa": "false"}
    image = cuda_gate.image_cuda(labels)
    assert image == cuda_gate.ImageCuda("2.13.0", "13.0", efa=False)
    result = cuda_gate.check(image, [node("p5.48xlarge", "580.65.06")], "p5.48xlarge")
    assert not result.problems  # a warning: it trains, over TCP between nodes
    (warning,) = result.warnings
    dlc = "public.ecr.aws/deep-learning-containers/pytorch:2.13.0-cu133-amzn2023"
    assert warning.startswith("efa_missing: p5.48xlarge has EFA")
    assert f"--base_image {dlc} --instance_type p5.48xlarge" in warning
    cuda_gate.enforce(result, "r/t:1")  # nothing to refuse
    # The same image on an instance without EFA, or one that has it: nothing to say.
    plain = cuda_gate.check(image, [node("g6e.xlarge", "580.65.06")], "g6e.xlarge")
    assert not plain.problems and not plain.warnings
    labels["fsdp-eks.efa"] = "true"
    fine = cuda_gate.check(
        cuda_gate.image_cuda(labels), [node("p5.48xlarge", "580.65.06")], "p5.48xlarge"
    )
    assert not fine.problems and not fine.warnings


def test_an_image_that_does_not_say_is_a_warning_on_an_efa_instance():
    result = cuda_gate.check(CU130, [node("p5.48xlarge", "580.65.06")], "p5.48xlarge")
    assert not result.problems
    assert any("fsdp-eks.efa" in w for w in result.warnings)
