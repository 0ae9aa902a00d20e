"""A cluster where eksctl installed its own NVIDIA and EFA device plugins (same names as
ours, eksctl v0.230.0's manifests): validate names them by their labels and images,
auto_fix never downgrades one, upgrades eksctl's older EFA plugin in place so the one
that ends up running tolerates our GPU taint, and says which to remove when it cannot."""

from __future__ import annotations

import pytest

from commands.manage_eks_cluster import manage_eks_cluster
from skills.kube.efa import GPU_TOLERATIONS
from tests.services import eks_cluster as seed

pytestmark = pytest.mark.integration


@pytest.fixture
def kube(kube_api):
    kube_api.reset()
    seed.seed_healthy(kube_api)
    objects = kube_api.emulator.objects
    # eksctl's EFA plugin tolerates only aws.amazon.com/efa: on nodes tainted
    # nvidia.com/gpu it schedules nowhere.
    objects[seed.NVIDIA_DS] = seed.eksctl_daemonset("nvidia_device_plugin", 2, 2)
    objects[seed.EFA_DS] = seed.eksctl_daemonset("efa_device_plugin", 0, 0)
    return kube_api


def _manage(kube, **kw):
    # The tool's own spelling (its CLI/MCP arguments), as the other cluster tests call it.
    return manage_eks_cluster(**{"kubeconfig": str(kube.kubeconfig), **kw})


def _checks(report):
    return {c.name: c for c in report.checks}


def _image(kube, key):
    return kube.emulator.objects[key]["spec"]["template"]["spec"]["containers"][0]["image"]


def test_validate_names_eksctls_plugins_by_their_own_marks(kube):
    report = _manage(kube)
    checks = _checks(report)
    nvidia, efa = checks["nvidia_device_plugin"], checks["efa_device_plugin"]
    assert nvidia.status == "ok"
    assert any("NVIDIA device plugin v0.20.0 (our pin)" in e for e in nvidia.evidence)
    assert efa.status == "failed" and efa.component == "efa_device_plugin"
    assert any("v0.5.4, older than our v0.5.20" in e for e in efa.evidence)
    assert "kube-system/aws-efa-k8s-device-plugin: 0/0 ready" in efa.evidence


def test_auto_fix_upgrades_eksctls_efa_plugin_and_leaves_its_nvidia_plugin(kube):
    applied = _manage(kube, action="auto_fix", confirm=True)
    assert {(p.component, p.kind, p.name) for p in applied.plan or []} == {
        ("efa_device_plugin", "DaemonSet", "aws-efa-k8s-device-plugin")
    }
    assert _image(kube, seed.NVIDIA_DS) == "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"
    assert _image(kube, seed.EFA_DS).endswith("/eks/aws-efa-k8s-device-plugin:v0.5.20")
    tolerated = {
        t["key"]
        for t in kube.emulator.objects[seed.EFA_DS]["spec"]["template"]["spec"]["tolerations"]
    }
    assert {t["key"] for t in GPU_TOLERATIONS} <= tolerated


def test_a_newer_plugin_is_adopted_never_downgraded(kube):
    newer = seed.eksctl_daemonset("nvidia_device_plugin", 2, 1)  # not ready: a failed check
    newer["spec"]["template"]["spec"]["containers"][0]["image"] = (
        "nvcr.io/nvidia/k8s-device-plugin:v0.21.0"
    )
    kube.emulator.objects[seed.NVIDIA_DS] = newer
    kube.emulator.objects["v1/nodes", None, "gpu-1"] = seed.node("gpu-1", "p4d.24xlarge", gpus=0)
    report = _manage(kube, action="auto_fix", confirm=True)
    assert "nvidia_device_plugin" not in {p.component for p in report.plan or []}
    assert _image(kube, seed.NVIDIA_DS) == "nvcr.io/nvidia/k8s-device-plugin:v0.21.0"
    nvidia = _checks(report)["nvidia_device_plugin"]
    assert any("newer than our v0.20.0: adopted as is" in e for e in nvidia.evidence)


def test_a_newer_efa_plugin_without_our_taint_is_named_for_removal(kube):
    newer = seed.eksctl_daemonset("efa_device_plugin", 0, 0)
    newer["spec"]["template"]["spec"]["containers"][0]["image"] = (
        "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.99"
    )
    kube.emulator.objects[seed.EFA_DS] = newer
    report = _manage(kube)
    efa = _checks(report)["efa_device_plugin"]
    assert efa.component is None  # auto_fix leaves it
    assert "does not tolerate the taint(s) nvidia.com/gpu" in (efa.fix or "")
    assert "kubectl -n kube-system delete ds aws-efa-k8s-device-plugin" in (efa.fix or "")


def test_a_second_plugin_beside_ours_is_named_not_doubled(kube):
    helm = seed.plugin_daemonset("nvidia_device_plugin", 2, 2)
    helm["metadata"] = {"name": "nvdp-nvidia-device-plugin", "namespace": "nvidia"}
    kube.emulator.objects["apps/v1/daemonsets", "nvidia", "nvdp-nvidia-device-plugin"] = helm
    report = _manage(kube)
    nvidia = _checks(report)["nvidia_device_plugin"]
    assert nvidia.status == "warning" and nvidia.component is None
    assert "2 NVIDIA device plugin DaemonSets" in (nvidia.fix or "")
