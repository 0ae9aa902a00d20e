"""Events filtered by the API server (issue 35 item 2): the monitor's poll and the
doctor's snapshot ask for the events of the job's own objects (fieldSelector), so what
they cost does not grow with the events of everything else in the namespace. kmock
honours fieldSelector for events and counts the LISTs and the objects it serves."""

from __future__ import annotations

import pytest

from commands.deploy_training_job import deploy_training_job
from skills.training_job_deployer.targets.kubernetes.settings import KubernetesSettings
from skills.training_job_deployer.targets.kubernetes.target import KubernetesTarget
from tests.services.kube import fields_match
from tests.services.training_operator import TrainingOperator

pytestmark = pytest.mark.integration

NOISE = (0, 200, 3_200)  # events about other objects in the namespace: 16x


@pytest.fixture
def operator(kube_api) -> TrainingOperator:
    kube_api.reset()
    return TrainingOperator(kube_api)


def _noise(kube_api, total: int) -> None:
    """Events about other jobs' pods, other jobs and an unrelated node, up to `total`."""
    objects = kube_api.emulator.objects
    kinds = ("Pod", "PyTorchJob", "Node")
    for i in range(total):
        kind = kinds[i % 3]
        name = {"Pod": f"other-{i}-worker-0", "PyTorchJob": f"other-{i}", "Node": "ip-10-0-9-9"}
        objects["v1/events", "default", f"noise-{i}"] = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"noise-{i}", "namespace": "default"},
            "involvedObject": {"kind": kind, "name": name[kind], "namespace": "default"},
            "reason": "FailedScheduling", "message": "not ours", "type": "Warning",
        }  # fmt: skip


def _cost(kube_api, read) -> tuple[int, int, object]:
    emulator = kube_api.emulator
    lists, served = emulator.lists.get("v1/events", 0), emulator.listed_objects
    out = read()
    return emulator.lists.get("v1/events", 0) - lists, emulator.listed_objects - served, out


def test_a_poll_and_a_snapshot_cost_the_same_whatever_the_namespaces_events(operator, kube_api):
    deploy_training_job(job_name="llama", num_nodes=2, gpu_per_node=8, image_uri="localhost:9/f:1",
                        instance_type="p5.48xlarge", max_steps=6, wait_seconds=0)  # fmt: skip
    operator.run("llama", outcome="Running")
    pending = {"status": {"phase": "Pending", "containerStatuses": []}}
    operator.core.patch_namespaced_pod_status("llama-worker-0", "default", pending,
                                              _preload_content=False)  # fmt: skip
    why = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."
    operator.add_event("llama-worker-0", "FailedScheduling", why)
    target = KubernetesTarget(KubernetesSettings())
    polls, snapshots = [], []
    for noise in NOISE:
        _noise(kube_api, noise)
        lists, served, state = _cost(kube_api, lambda: target.describe("llama"))
        assert state.message == f"FailedScheduling: {why}"  # the event was found
        polls.append((lists, served))
        lists, served, snap = _cost(kube_api, lambda: target.snapshot("llama"))
        assert [e["reason"] for e in snap["events"]] == ["FailedScheduling"]
        snapshots.append((lists, served))
    # The job's and the waiting pod's events: 2 LISTs; 2 pods + 1 event served.
    assert polls == [(2, 3)] * len(NOISE)
    # The job and its 2 pods: 3 LISTs, whatever the namespace holds.
    assert snapshots == [(3, 3)] * len(NOISE)


def test_a_large_job_asks_per_kind_not_per_pod(operator, kube_api):
    from skills.training_job_deployer.targets.kubernetes.kube_monitor import EVENT_LISTS

    deploy_training_job(job_name="big", num_nodes=EVENT_LISTS + 8, gpu_per_node=8,
                        image_uri="localhost:9/f:1", instance_type="p5.48xlarge",
                        max_steps=6, wait_seconds=0, skip_gate=True)  # fmt: skip
    operator.run("big", outcome="Failed")
    operator.add_event("big-worker-30", "Evicted", "The node was low on resource: memory.")
    _noise(kube_api, 300)
    lists, _, snap = _cost(kube_api, lambda: KubernetesTarget(KubernetesSettings()).snapshot("big"))
    assert lists == 2  # Pod, PyTorchJob (no node named): one LIST per kind
    assert [(e["reason"], e["involvedObject"]["name"]) for e in snap["events"]] == [
        ("Evicted", "big-worker-30")
    ]


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("involvedObject.name=a", True),
        ("involvedObject.name==a", True),
        ("involvedObject.name=b", False),
        ("involvedObject.kind=Pod,involvedObject.name=a", True),
        ("involvedObject.kind=Node,involvedObject.name=a", False),
        ("type!=Normal", True),
        ("type!=Warning", False),
        ("reason=", False),  # a field that is set does not equal ''
        ("source.host=", True),  # a missing field is ''
    ],
)
def test_the_stand_ins_field_selector(selector, matches):
    event = {"involvedObject": {"kind": "Pod", "name": "a"}, "type": "Warning", "reason": "X"}
    assert fields_match(event, selector) is matches
