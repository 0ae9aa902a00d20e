"""Issue 29 item 4: on a known instance type a job uses every GPU of the node unless told
otherwise, and asking fewer on an EFA instance (billed whole) warns with the idle cost."""

from __future__ import annotations

import pytest

from commands.deploy_training_job import deploy_training_job
from skills.catalog.gpu_capacity import idle_gpu_warning
from skills.catalog.instances import INSTANCES

IMAGE = "r.invalid/fsdp:v1"


def dry_run(**kwargs):
    args = {"job_name": "every", "target": "kubernetes", "image_uri": IMAGE, "dry_run": True,
            "kubeconfig": "/nonexistent/kubeconfig"}  # fmt: skip
    return deploy_training_job(**{**args, **kwargs})


def first_pod(plan) -> dict:
    (replica,) = plan.manifest["spec"]["pytorchReplicaSpecs"].values()
    return replica["template"]["spec"]


def test_a_p5_dry_run_renders_all_8_gpus_per_pod_without_a_warning():
    result = dry_run(instance_type="p5.48xlarge")
    plan = result.plan
    assert plan.manifest["spec"]["nprocPerNode"] == "8"
    (container,) = first_pod(plan)["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert "--nproc_per_node=8" in container["command"]
    assert not [w for w in plan.warnings if "idle" in w]
    # The next step submits the same shape.
    assert result.next_step.arguments["gpu_per_node"] == 8


def test_without_an_instance_type_the_default_stays_two():
    plan = dry_run().plan
    assert plan.manifest["spec"]["nprocPerNode"] == "2"


def test_fewer_gpus_on_an_efa_instance_warns_with_the_idle_cost():
    plan = dry_run(instance_type="p5.48xlarge", gpu_per_node=2, num_nodes=2).plan
    assert plan.manifest["spec"]["nprocPerNode"] == "2"
    (warning,) = [w for w in plan.warnings if "idle" in w]
    # 6 of 8 GPUs of a $55.04/h node, on 2 nodes: 55.04 * 6/8 * 2 = 82.56.
    assert "6 of 8 GPUs idle" in warning and "$82.56/h" in warning and "$110.08/h" in warning


def test_fewer_gpus_on_an_instance_without_efa_does_not_warn():
    assert idle_gpu_warning("p3.8xlarge", 1, 1) is None


@pytest.mark.parametrize("spec", INSTANCES, ids=lambda s: s.name)
def test_each_instance_defaults_to_its_own_gpu_count(spec):
    plan = dry_run(instance_type=spec.name, model_type="debug").plan
    assert plan.manifest["spec"]["nprocPerNode"] == str(spec.gpus)
