"""Capacity as a rule: the GPUs pods hold on a node are counted one way (requests; a
limit where only a limit is set; ended pods free theirs; init containers by the
scheduler's effective-request rule), and more GPUs per node than an instance type has
is NOT_ENOUGH_GPUS with a hint naming the most it takes and a larger type."""

from __future__ import annotations

import pytest

from skills.catalog.gpu_capacity import larger_instance, require_gpus_per_node
from skills.catalog.instances import INSTANCES, InstanceSpec
from skills.kube.gpu_nodes import (
    NOT_ENDED_SELECTOR,
    container_gpu_request,
    gpus_requested_by_node,
    pod_gpu_request,
)
from skills.shared.errors import ErrorCode, ToolFailure


def container(requests=None, limits=None, **extra):
    resources = {}
    if requests is not None:
        resources["requests"] = {"nvidia.com/gpu": requests, "cpu": "4"}
    if limits is not None:
        resources["limits"] = {"nvidia.com/gpu": limits, "memory": "8Gi"}
    return {"name": "c", "image": "x", "resources": resources, **extra}


def pod(node, *containers, phase="Running", init=()):
    spec = {"containers": list(containers), "initContainers": list(init)}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": "p"}, "spec": spec, "status": {"phase": phase}}


# counting -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("requests", "limits", "held"),
    [
        ("2", None, 2),  # requests only
        (None, "4", 4),  # limits only: Kubernetes makes the request the limit
        ("4", "4", 4),  # both (an extended resource's request must equal its limit)
        (8, None, 8),  # a number, as a client may send it
        (None, None, 0),  # a CPU container
    ],
)
def test_a_containers_request_is_its_request_else_its_limit(requests, limits, held):
    assert container_gpu_request(container(requests, limits)) == held


def test_a_container_without_resources_holds_nothing():
    assert container_gpu_request({"name": "c"}) == 0


def test_ended_pods_and_unbound_pods_hold_no_gpus():
    pods = [
        pod("a", container(limits="4")),  # Running, limits only
        pod("a", container(requests="2"), phase="Pending"),  # bound, still starting
        pod("a", container(limits="8"), phase="Succeeded"),
        pod("b", container(requests="8"), phase="Failed"),
        pod("b", container(requests="1"), phase="Unknown"),  # node lost contact: still held
        pod(None, container(requests="8"), phase="Pending"),  # not scheduled yet
    ]
    assert gpus_requested_by_node(pods) == {"a": 6, "b": 1}


def test_the_containers_of_a_pod_add_up():
    assert pod_gpu_request(pod("a", container("2"), container(None, "3"))["spec"]) == 5


def test_an_init_container_that_asks_more_sets_the_pods_request():
    # Init containers run one at a time before the others: the pod needs the larger.
    spec = pod("a", container("2"), init=[container("4"), container("1")])["spec"]
    assert pod_gpu_request(spec) == 4
    smaller = pod("a", container("2"), container("2"), init=[container("3")])["spec"]
    assert pod_gpu_request(smaller) == 4


def test_sidecars_add_to_the_containers_and_to_the_init_containers_after_them():
    sidecar = container("1", restartPolicy="Always")
    # sidecar (1) then an init container (4) beside it: peak 5; then containers 2 + 1 = 3.
    spec = pod("a", container("2"), init=[sidecar, container("4")])["spec"]
    assert pod_gpu_request(spec) == 5
    # an init container before the sidecar runs without it: 3; then containers 3 + 1 = 4.
    spec = pod("a", container("3"), init=[container("3"), sidecar])["spec"]
    assert pod_gpu_request(spec) == 4


def test_the_api_selector_names_both_ended_phases():
    assert set(NOT_ENDED_SELECTOR.split(",")) == {
        "status.phase!=Succeeded",
        "status.phase!=Failed",
    }


# the rule per instance row --------------------------------------------------------------


@pytest.mark.parametrize("spec", INSTANCES, ids=lambda s: s.name)
def test_every_instance_takes_its_gpus_and_refuses_one_more(spec: InstanceSpec):
    require_gpus_per_node(spec.name, spec.gpus)  # as many as it has: fine
    require_gpus_per_node(f"ml.{spec.name}", 1)
    with pytest.raises(ToolFailure) as caught:
        require_gpus_per_node(spec.name, spec.gpus + 1)
    failure = caught.value
    assert failure.code == ErrorCode.NOT_ENOUGH_GPUS
    assert f"gpu_per_node={spec.gpus} or fewer on {spec.name}" in failure.hint
    assert failure.details["instance_gpus"] == spec.gpus
    bigger = failure.details["larger_instance_type"]
    enough = [i for i in INSTANCES if i.gpus > spec.gpus]
    if not enough:
        assert bigger is None and "no instance type has" in failure.hint
        return
    suggested = next(i for i in INSTANCES if i.name == bigger)
    assert f"instance_type={bigger}" in failure.hint
    assert suggested.gpus >= spec.gpus + 1
    if any(i.gpu == spec.gpu for i in enough):  # the same GPU when one is big enough
        assert suggested.gpu == spec.gpu
    # none of that GPU with fewer GPUs that would still do
    assert not [i for i in enough if i.gpu == suggested.gpu and i.gpus < suggested.gpus]


@pytest.mark.parametrize(
    ("instance_type", "asked", "maximum", "larger"),
    [
        ("ml.g5.12xlarge", 8, 4, "ml.g5.48xlarge"),  # the case: a SageMaker name stays one
        ("g6e.xlarge", 4, 1, "g6e.12xlarge"),  # 4 L40S: the cheaper of the two 4-GPU types
        ("p5.4xlarge", 2, 1, "p5.48xlarge"),
        ("g5.2xlarge", 3, 1, "g5.12xlarge"),
    ],
)
def test_the_hint_names_the_maximum_and_a_larger_type(instance_type, asked, maximum, larger):
    with pytest.raises(ToolFailure) as caught:
        require_gpus_per_node(instance_type, asked)
    assert f"gpu_per_node={maximum} or fewer on {instance_type}" in caught.value.hint
    assert f"instance_type={larger} (" in caught.value.hint
    assert f"gpu_per_node={asked} but {instance_type} has {maximum} GPU(s)" in caught.value.message


def test_more_gpus_than_any_instance_has_names_no_larger_type():
    with pytest.raises(ToolFailure) as caught:
        require_gpus_per_node("p5.48xlarge", 16)
    assert caught.value.details["larger_instance_type"] is None
    assert "num_nodes" in caught.value.hint
    assert larger_instance(INSTANCES[0], 64) is None


def test_an_instance_type_outside_the_catalogue_is_not_checked():
    require_gpus_per_node("m7i.48xlarge", 8)  # nothing to check it against: no error
