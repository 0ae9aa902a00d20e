"""The Kubernetes layer's single homes: where an object lives (skills.kube.objects), the
suite's label (skills.shared.ownership), and why a pod waits (skills.kube.pods), each
spelled once and read the same by every target."""

from __future__ import annotations

from pathlib import Path

import pytest

from skills.kube.objects import api_version, kind_path, object_path
from skills.kube.pods import why_pod_waits
from skills.model_server.kubernetes.target import waiting_reason
from skills.shared.ownership import MANAGED_BY_LABEL, MODEL_SERVER_LABEL
from skills.training_job_deployer.targets.kubernetes.job_state import (
    waiting_reason as job_waiting_reason,
)

ROOT = Path(__file__).resolve().parents[2]


def _sources(*packages: str) -> dict[str, str]:
    return {
        str(path.relative_to(ROOT)): path.read_text()
        for package in packages
        for path in (ROOT / package).rglob("*.py")
    }


def test_the_suite_label_is_spelled_in_one_module():
    spelled = [
        p for p, text in _sources("skills", "commands").items() if MANAGED_BY_LABEL[0] in text
    ]
    assert spelled == ["skills/shared/ownership.py"]


@pytest.mark.parametrize(
    "module",
    [
        "skills/model_server/kubernetes/target.py",
        "skills/training_job_deployer/targets/kubernetes/kube_monitor.py",
    ],
)
def test_the_targets_spell_no_rest_path(module):
    text = (ROOT / module).read_text()
    assert '"/api' not in text and 'f"/api' not in text


PATHS = [
    (("Deployment", "ml", "web"), "/apis/apps/v1/namespaces/ml/deployments/web"),
    (("Deployment",), "/apis/apps/v1/deployments"),  # every namespace
    (("Pod", "ml"), "/api/v1/namespaces/ml/pods"),
    (("Node", "ml", "n1"), "/api/v1/nodes/n1"),  # cluster-scoped: no namespace
    (("PyTorchJob", "ml", "j"), "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/j"),
]


@pytest.mark.parametrize(("args", "path"), PATHS)
def test_kind_path(args, path):
    assert kind_path(*args) == path


def test_object_path_and_api_version():
    obj = {"kind": "Service", "metadata": {"name": "s", "namespace": "ml"}}
    assert object_path(obj) == "/api/v1/namespaces/ml/services/s"
    assert api_version("PyTorchJob") == "kubeflow.org/v1" and api_version("Pod") == "v1"
    with pytest.raises(KeyError):  # a namespaced object without its namespace
        object_path({"kind": "Service", "metadata": {"name": "s"}})


def _pod(*, init=None, main=None, scheduled=None):
    status = {}
    if init:
        status["initContainerStatuses"] = [{"name": "fetch", "state": {"waiting": init}}]
    if main:
        status["containerStatuses"] = [{"name": "main", "state": {"waiting": main}}]
    if scheduled:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", **scheduled}]
    return {"metadata": {"name": "p-0", "labels": {MODEL_SERVER_LABEL: "web"}}, "status": status}


# (pod, what it waits for; None: nothing worth saying)
WAITS = [
    (_pod(main={"reason": "ContainerCreating"}), None),
    (_pod(main={"reason": "PodInitializing"}), None),  # the job target once reported this
    (_pod(), None),
    ({"status": "garbage"}, None),
    (_pod(main={"reason": "ImagePullBackOff", "message": "no such image"}),
     "Pod p-0 container main: ImagePullBackOff: no such image"),
    (_pod(main={"reason": "CreateContainerConfigError"}),
     "Pod p-0 container main: CreateContainerConfigError"),
    (_pod(init={"reason": "ErrImagePull"}, main={"reason": "PodInitializing"}),
     "Pod p-0 container fetch: ErrImagePull"),  # the job target once missed init containers
    (_pod(scheduled={"message": "0/3 nodes have nvidia.com/gpu"}, main={"reason": "X"}),
     "Pod p-0 is not scheduled: 0/3 nodes have nvidia.com/gpu"),
]  # fmt: skip


@pytest.mark.parametrize(("pod", "says"), WAITS)
def test_why_a_pod_waits(pod, says):
    assert why_pod_waits(pod) == says


@pytest.mark.parametrize(("pod", "says"), WAITS)
def test_every_target_reads_a_waiting_pod_the_same(pod, says):
    assert waiting_reason([pod], "web") == says
    job = job_waiting_reason([pod], [])
    assert job == says
