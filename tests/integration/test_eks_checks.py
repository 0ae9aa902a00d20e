"""The cluster checklist against kmock: a healthy seeded cluster passes every check; each
check fails on its own broken variant with the right evidence and fix; reads are
batched (the API calls do not grow with the nodes)."""

from __future__ import annotations

import pytest

from commands.manage_eks_cluster import manage_eks_cluster
from tests.services import eks_cluster as seed

pytestmark = pytest.mark.integration
ALL = {"checkpoint_pvc": "ckpt", "rdzv_backend": "etcd"}


@pytest.fixture
def kube(kube_api):
    kube_api.reset()
    seed.seed_healthy(kube_api)
    return kube_api


def _validate(kube, **kw):
    return manage_eks_cluster(**{"kubeconfig": str(kube.kubeconfig), **ALL, **kw})


def _by_name(report):
    return {c.name: c for c in report.checks}


def test_a_healthy_cluster_passes_every_check(kube):
    report = _validate(kube)
    checks = _by_name(report)
    assert set(checks) == {
        "api_access",
        "nodes_ready",
        "gpu_allocatable",
        "nvidia_device_plugin",
        "efa_device_plugin",
        "dcgm_exporter",
        "training_operator",
        "pytorchjob_crd",
        "training_engine",
        "load_balancer_controller",
        "fsx_csi_driver",
        "checkpoint_pvc",
        "etcd_service",
    }
    assert {c.status for c in report.checks} == {"ok"}, report.checks
    assert "gpu-0 (p4d.24xlarge): nvidia.com/gpu 8" in checks["gpu_allocatable"].evidence
    assert report.cli_exit_status() == 0


def _break_gpu_zero(kube):
    kube.emulator.objects["v1/nodes", None, "gpu-1"] = seed.node("gpu-1", "p4d.24xlarge", gpus=0)


def _break_not_ready(kube):
    kube.emulator.objects["v1/nodes", None, "gpu-1"] = seed.node(
        "gpu-1", "p4d.24xlarge", ready=False
    )


def _delete(key):
    def broken(kube):
        del kube.emulator.objects[key]

    return broken


def _pvc_pending(kube):
    kube.emulator.objects[seed.PVC].patch({"status": {"phase": "Pending"}})


def _operator_not_ready(kube):
    kube.emulator.objects[seed.OPERATOR].patch({"status": {"readyReplicas": 0}})


def _plugin_not_ready(kube):
    kube.emulator.objects[seed.NVIDIA_DS].patch({"status": {"numberReady": 1}})


@pytest.mark.parametrize(
    ("breakage", "check", "status", "evidence", "fix", "component"),
    [
        (
            _break_gpu_zero,
            "gpu_allocatable",
            "failed",
            "gpu-1 (p4d.24xlarge): nvidia.com/gpu 0, expected 8",
            "device plugin runs",
            None,
        ),
        (_break_not_ready, "nodes_ready", "warning", "not Ready: gpu-1", "describe node", None),
        (
            _delete(seed.NVIDIA_DS),
            "nvidia_device_plugin",
            "failed",
            "no NVIDIA device plugin DaemonSet",
            "v0.20.0",
            "nvidia_device_plugin",
        ),
        (
            _plugin_not_ready,
            "nvidia_device_plugin",
            "failed",
            "kube-system/nvidia-device-plugin-daemonset: 1/2 ready",
            "tolerations",
            None,
        ),
        (
            _delete(seed.EFA_DS),
            "efa_device_plugin",
            "failed",
            "no EFA device plugin DaemonSet",
            "EFA device plugin",
            "efa_device_plugin",
        ),
        (
            _delete(seed.OPERATOR),
            "training_operator",
            "failed",
            "no Deployment training-operator in any namespace",
            "v1.9.4",
            "training_operator",
        ),
        (
            _operator_not_ready,
            "training_operator",
            "failed",
            "kubeflow/training-operator: 0/1 ready",
            "logs",
            None,
        ),
        (
            _delete(seed.CRD),
            "pytorchjob_crd",
            "failed",
            "no CRD pytorchjobs.kubeflow.org",
            "CRD",
            "training_operator",
        ),
        (
            _delete(seed.LB_CONTROLLER),
            "load_balancer_controller",
            "warning",
            "no Deployment aws-load-balancer-controller",
            "helm install aws-load-balancer-controller eks/aws-load-balancer-controller",
            None,
        ),
        (
            _delete(seed.FSX_DS),
            "fsx_csi_driver",
            "failed",
            "no fsx-csi-node DaemonSet or fsx-csi-controller Deployment",
            "aws-fsx-csi-driver",
            None,
        ),
        (_pvc_pending, "checkpoint_pvc", "failed", "default/ckpt: Pending", "describe pvc", None),
        (
            _delete(seed.PVC),
            "checkpoint_pvc",
            "failed",
            "no PVC default/ckpt",
            "Create the PVC",
            None,
        ),
        (
            _delete(seed.ETCD),
            "etcd_service",
            "failed",
            "no etcd Service (port 2379) in default",
            "etcd",
            "etcd",
        ),
    ],
)
def test_each_check_fails_on_its_own_breakage(
    kube, breakage, check, status, evidence, fix, component
):
    breakage(kube)
    checks = _by_name(_validate(kube))
    broken = checks[check]
    assert broken.status == status
    assert evidence in broken.evidence
    assert fix in broken.fix
    assert broken.component == component
    others = {n: c.status for n, c in checks.items() if n != check and c.status != "ok"}
    assert others == {}, f"only {check} should be affected"


def test_gpu_zero_without_a_device_plugin_points_at_the_plugin(kube):
    _break_gpu_zero(kube)
    del kube.emulator.objects[seed.NVIDIA_DS]
    checks = _by_name(_validate(kube))
    assert checks["gpu_allocatable"].component == "nvidia_device_plugin"
    assert "Install the NVIDIA device plugin" in checks["gpu_allocatable"].fix


def test_hyperpod_names_are_known_and_a_cpu_only_cluster_has_no_gpu_nodes(kube):
    kube.emulator.objects["v1/nodes", None, "gpu-0"] = seed.node(
        "gpu-0", "ml.p5.48xlarge", gpus=8, efa=32
    )
    kube.emulator.objects["v1/nodes", None, "gpu-1"] = seed.node(
        "gpu-1", "ml.p5.48xlarge", gpus=4, efa=32
    )
    checks = _by_name(_validate(kube))
    assert (
        "gpu-1 (ml.p5.48xlarge): nvidia.com/gpu 4, expected 8" in checks["gpu_allocatable"].evidence
    )
    for name in ("gpu-0", "gpu-1"):
        del kube.emulator.objects["v1/nodes", None, name]
    checks = _by_name(_validate(kube))
    assert checks["gpu_allocatable"].status == "failed"
    assert checks["gpu_allocatable"].evidence == ["no GPU nodes"]
    assert checks["efa_device_plugin"].status == "ok"


def test_reads_are_batched_one_list_per_kind(kube):
    requests = kube.emulator._requests  # kmock 0.8: every request the server answered
    before = len(requests)
    small = _validate(kube)
    assert len(requests) - before == small.api_calls  # the tool counts what the server saw
    for i in range(2, 40):
        kube.emulator.objects["v1/nodes", None, f"gpu-{i}"] = seed.node(f"gpu-{i}", "p4d.24xlarge")
    before = len(requests)
    big = _validate(kube)
    assert len(requests) - before == big.api_calls == small.api_calls
    # version, nodes, pods, daemonsets, deployments, the CRD, the PVC, the Services, and
    # Trainer v2's group discovery (not installed here: nothing more of it is read)
    assert small.api_calls == 9
    paths = [str(r.url.path) for r in requests[before:]]
    assert not [p for p in paths if "/nodes/" in p], "no per-node reads"


def test_unreachable_api_and_a_bad_kubeconfig_are_typed_errors(kube, tmp_path):
    from skills.shared.errors import ToolFailure

    bad = tmp_path / "kubeconfig"
    bad.write_text(kube.kubeconfig.read_text().replace(kube.url, "http://127.0.0.1:9"))
    with pytest.raises(ToolFailure) as failure:
        _validate(kube, kubeconfig=str(bad))
    assert failure.value.code == "endpoint_unreachable" and failure.value.hint
    with pytest.raises(ToolFailure) as failure:
        _validate(kube, kubeconfig=str(tmp_path / "missing"))
    assert failure.value.code == "kubeconfig_invalid"
