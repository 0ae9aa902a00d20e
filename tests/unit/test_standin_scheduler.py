"""The stand-in scheduler (tests/services/kubelet.py) keeps pods off nodes as the real
one does, each rule on its own: a cordon, a NoSchedule taint the pod does not tolerate,
a required nodeAffinity (the one the quarantine's resubmission carries)."""

from __future__ import annotations

import pytest

from skills.kube.quarantine import TAINT_KEY
from skills.training_job_deployer.targets.kubernetes.manifest import node_affinity
from tests.services.kubelet import placeable

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def node(name: str = "n1", **spec) -> dict:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}, "spec": spec}


def pod(**spec) -> dict:
    return {"tolerations": [GPU_TOLERATION], **spec}


@pytest.mark.parametrize(
    ("pod_spec", "node_obj", "allowed"),
    [
        (pod(), node(), True),
        (pod(), node(unschedulable=True), False),
        (pod(), node(taints=[{"key": TAINT_KEY, "value": "x", "effect": "NoSchedule"}]), False),
        (pod(), node(taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]), True),
        (pod(), node(taints=[{"key": "soft", "effect": "PreferNoSchedule"}]), True),
        (pod(affinity=node_affinity(("n1",))), node("n1"), False),
        (pod(affinity=node_affinity(("n1",))), node("n2"), True),
    ],
    ids=["plain", "cordoned", "quarantine-taint", "tolerated-taint", "soft-taint",
         "affinity-excludes", "affinity-elsewhere"],
)  # fmt: skip
def test_each_rule_keeps_a_pod_off_a_node(pod_spec, node_obj, allowed):
    assert placeable(pod_spec, node_obj) is allowed
