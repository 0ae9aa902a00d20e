"""Issue 48 item 5: get_training_job on Kubernetes shows the job's pods' CPU and memory
from the metrics API (metrics.k8s.io, the metrics-server) when the cluster serves it, a
note naming the add-on when not. kmock stands in for the metrics-server
(tests/services/kube.py `set_pod_usage`: PodMetrics as metrics-server v0.9.0 serves
them), the pods' use recorded by each test; both engines' pods are selected by their
job's label."""

from __future__ import annotations

from typing import Any

import pytest

from commands.deploy_training_job import deploy_training_job
from commands.get_training_job import get_training_job
from skills.kube.client import LIST_CHUNK
from skills.kube.pod_metrics import job_pod_usage
from skills.training_job_deployer.targets.kubernetes.settings import KubernetesSettings
from skills.training_job_deployer.targets.kubernetes.target import KubernetesTarget
from tests.integration.test_trainjob_target import deploy as deploy_trainjob
from tests.integration.test_trainjob_target import install_trainer, jobset_pod, set_status
from tests.services import crds
from tests.services.kube import METRICS_PODS, PYTORCHJOB
from tests.services.training_operator import RUN_LOG, TrainingOperator

pytestmark = pytest.mark.integration

K8S: dict[str, Any] = {"target": "kubernetes"}
METRICS_LIST = "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods"


@pytest.fixture
def operator(kube_api) -> TrainingOperator:
    kube_api.reset()
    return TrainingOperator(kube_api)


def running_pytorchjob(operator: TrainingOperator, name: str) -> list[str]:
    args: dict[str, Any] = {
        "job_name": name, "num_nodes": 2, "gpu_per_node": 8, "image_uri": "localhost:9/x:1",
        "max_steps": 6, "wait_seconds": 0, "monitor": False, "engine": "pytorchjob",
        "skip_gate": True,
    }  # fmt: skip
    deploy_training_job(**args, **K8S)
    return operator.run(name, outcome="Running")


def test_get_training_job_shows_each_pods_cpu_and_memory_when_the_metrics_api_is_served(
    operator, kube_api
):
    pods = running_pytorchjob(operator, "llama")
    other = running_pytorchjob(operator, "other")
    kube_api.set_pod_usage("default", pods[0], {"pytorch": {"cpu": "3500m", "memory": "6Gi"}})
    kube_api.set_pod_usage("default", pods[1], {"pytorch": {"cpu": "1500000000n",
                                                            "memory": "2097152Ki"}})  # fmt: skip
    kube_api.set_pod_usage("default", other[0], {"pytorch": {"cpu": "64", "memory": "900Gi"}})
    state = get_training_job(job_name="llama", **K8S)
    assert state.pod_usage == {
        "pods": 2,
        "cpu_cores": {"total": 5.0, "min": 1.5, "max": 3.5},
        "memory_mib": {"total": 8192.0, "min": 2048.0, "max": 6144.0},
        "top": [{"pod": pods[0], "cpu_cores": 3.5, "memory_mib": 6144.0},
                {"pod": pods[1], "cpu_cores": 1.5, "memory_mib": 2048.0}],
        "window": "15s",
    }, state.pod_usage  # fmt: skip
    assert "2 pods: CPU 5 cores" in dict(state.summary_rows())["pod use"]
    # One LIST of the job's pods' metrics, selected by the job's label, paged.
    asked = [
        r for r in kube_api.emulator
        if r.resource is not None and str(r.resource.group) == "metrics.k8s.io"
        and r.params.get("labelSelector")
    ]  # fmt: skip
    assert len(asked) == 1 and kube_api.emulator.lists[METRICS_PODS] == 1, asked
    assert asked[0].params["labelSelector"] == "training.kubeflow.org/job-name=llama"
    assert asked[0].params["limit"] == "500"


def test_a_cluster_without_the_metrics_server_gets_a_note_naming_the_add_on(operator, kube_api):
    running_pytorchjob(operator, "llama")
    target = KubernetesTarget(KubernetesSettings())
    state = target.describe("llama")
    note = (state.pod_usage or {}).get("note", "")
    assert "metrics-server" in note and "create-addon" in note, state.pod_usage
    assert not [p for p in target.client.paths if "namespaces/default/pods" in p
                and "metrics.k8s.io" in p]  # fmt: skip
    # A job that ended runs no pods: nothing asked, nothing shown.
    operator.run("llama", outcome="Succeeded")
    assert get_training_job(job_name="llama", **K8S).pod_usage is None


def test_a_trainjobs_pods_are_found_by_their_jobset_label(kube_api):
    kube_api.reset()
    crds.withdraw(kube_api.emulator, PYTORCHJOB)
    install_trainer(kube_api)
    deploy_trainjob()
    rank0 = jobset_pod(kube_api, "llama", 0, "zzzzz")
    rank1 = jobset_pod(kube_api, "llama", 1, "aaaaa")
    kube_api.set_pod_log("default", rank0, RUN_LOG)
    set_status(kube_api, "llama", conditions=[])
    kube_api.set_pod_usage("default", rank0, {"node": {"cpu": "250m", "memory": "123Mi"}})
    two = {"node": {"cpu": "750m", "memory": "1Gi"}, "sidecar": {"cpu": "1", "memory": "1Mi"}}
    kube_api.set_pod_usage("default", rank1, two)
    state = get_training_job(job_name="llama", **K8S)
    assert state.engine == "trainjob" and state.pod_usage is not None, state
    assert state.pod_usage["pods"] == 2
    assert state.pod_usage["cpu_cores"] == {"total": 2.0, "min": 0.25, "max": 1.75}
    assert [p["pod"] for p in state.pod_usage["top"]] == [rank1, rank0]
    assert METRICS_PODS in kube_api.emulator.resources


def test_a_metrics_api_that_fails_is_a_note_and_the_jobs_state_still_comes(operator, kube_api):
    pods = running_pytorchjob(operator, "llama")
    kube_api.set_pod_usage("default", pods[0], {"pytorch": {"cpu": "1", "memory": "1Gi"}})
    _ = kube_api.emulator[f"get {METRICS_LIST}"] << 503  # the metrics-server is down
    state = get_training_job(job_name="llama", **K8S)
    assert state.status == "running" and state.steps > 0
    note = (state.pod_usage or {}).get("note", "")
    assert note.startswith("pod CPU/memory: the metrics API did not answer (503"), note


def test_many_pods_metrics_are_read_in_chunks_and_summed_up_in_the_same_few_lines(kube_api):
    kube_api.reset()
    selector = "training.kubeflow.org/job-name=big"
    for i in range(LIST_CHUNK + 100):
        name = f"big-worker-{i:04d}"
        kube_api.emulator.objects["v1/pods", "default", name] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"training.kubeflow.org/job-name": "big"}},
        }  # fmt: skip
        kube_api.set_pod_usage("default", name, {"pytorch": {"cpu": "500m", "memory": f"{i}Mi"}})
    reader = KubernetesTarget(KubernetesSettings()).client
    found = job_pod_usage(reader, "default", selector)
    assert found["pods"] == LIST_CHUNK + 100 and found["cpu_cores"]["total"] == 300.0
    assert [p["pod"] for p in found["top"]] == ["big-worker-0599", "big-worker-0598",
                                                "big-worker-0597"]  # fmt: skip
    assert kube_api.emulator.lists[METRICS_PODS] == 2  # limit/continue: two chunks
