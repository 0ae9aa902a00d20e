"""Issue 49 item 2: the Kubernetes lists ask the API server (kmock, which honours
labelSelector, limit, continue and metadata-only LISTs as the API server does) for what
a page needs. The whole objects a page is sent do not grow with the namespace: other
users' jobs, pods and objects are never sent; of the suite's jobs, each one's metadata
(its key: the API has no order by creation time), then the page's jobs, pods and
Services alone."""

from __future__ import annotations

from typing import Any

import pytest

from commands.list_model_servers import list_model_servers
from commands.list_training_jobs import list_training_jobs
from skills.kube.client import LIST_CHUNK
from skills.kube.pods import JOB_NAME_LABEL
from skills.model_server.kubernetes.manifest import labels as server_labels
from skills.shared.ownership import managed_labels
from skills.training_job_deployer.targets.kubernetes.kube_monitor import JOB_CHUNK
from skills.training_job_deployer.targets.kubernetes.manifest import LABEL_JOB
from tests.services.kube import PYTORCHJOB

pytestmark = pytest.mark.integration

K8S: dict[str, Any] = {"target": "kubernetes"}
PAGE = 5


def seed_job(kube, name: str, second: int, *, ours: bool = True) -> None:
    """A PyTorchJob that ran (created at `second`), its two pods and rank 0's log."""
    labels = managed_labels(**{LABEL_JOB: name}) if ours else {"team": "others"}
    kube.emulator.objects[PYTORCHJOB, "default", name] = {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": "default", "labels": labels,
                     "creationTimestamp": f"2026-01-01T{second // 3600:02d}:"
                                          f"{second // 60 % 60:02d}:{second % 60:02d}Z"},
        "spec": {"pytorchReplicaSpecs": {}},
        "status": {"conditions": [{"type": "Succeeded", "status": "True"}]},
    }  # fmt: skip
    for replica in ("master-0", "worker-0"):
        pod = f"{name}-{replica}"
        kube.emulator.objects["v1/pods", "default", pod] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": "default",
                         "labels": {JOB_NAME_LABEL: name}},
            "status": {"phase": "Succeeded"},
        }  # fmt: skip
        kube.set_pod_log("default", pod, '{"event": "summary", "steps": 6}\n')


def seed_other_objects(kube, count: int) -> None:
    """Objects of other users in the namespace: ConfigMaps and unlabelled pods."""
    for i in range(count):
        kube.emulator.objects["v1/configmaps", "default", f"cm-{i}"] = {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i}", "namespace": "default"}, "data": {"k": "v"},
        }  # fmt: skip
        kube.emulator.objects["v1/pods", "default", f"web-{i}"] = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"web-{i}", "namespace": "default", "labels": {"app": "web"}},
            "status": {"phase": "Running"},
        }  # fmt: skip


def page_cost(kube, **args) -> tuple[dict[str, int], int, int, list[str], int | None]:
    """(LISTs by resource, whole objects served, metadata-only items served, the jobs
    listed, more) of one page."""
    emulator = kube.emulator
    emulator.lists.clear()
    emulator.listed_objects = emulator.listed_metadata = 0
    page = list_training_jobs(**K8S, limit=PAGE, **args)
    return (dict(emulator.lists), emulator.listed_objects, emulator.listed_metadata,
            [j.job_name for j in page.jobs], page.more)  # fmt: skip


def test_a_page_is_sent_the_same_whether_the_namespace_holds_20_jobs_or_400(kube_api):
    """Twenty of the suite's jobs, then 380 more jobs of other users with their pods and
    800 other objects: the page's LISTs and the objects the API server sends are the same
    (on main the pods LIST sent every job's pods and the jobs LIST every job)."""
    kube_api.reset()
    for i in range(20):
        seed_job(kube_api, f"ours-{i:03d}", i)
    small = page_cost(kube_api)
    for i in range(380):
        seed_job(kube_api, f"theirs-{i:03d}", 100 + i, ours=False)
    seed_other_objects(kube_api, 400)
    large = page_cost(kube_api)
    assert small == large
    lists, whole, keys, names, more = large
    assert lists == {PYTORCHJOB: 2, "v1/pods": 1}  # the keys; the page's jobs; its pods
    assert (whole, keys) == (PAGE + 2 * PAGE, 20)
    assert names == [f"ours-{i:03d}" for i in (19, 18, 17, 16, 15)] and more == 15


def test_20_or_400_of_the_suites_jobs_send_the_same_whole_objects(kube_api):
    """20 then 400 of the suite's jobs: the same requests and the same whole objects
    sent (the page's jobs and pods); only each job's metadata is read past the page."""
    kube_api.reset()
    for i in range(20):
        seed_job(kube_api, f"job-{i:03d}", i)
    small = page_cost(kube_api)
    for i in range(20, 400):
        seed_job(kube_api, f"job-{i:03d}", i)
    large = page_cost(kube_api)
    assert small[:2] == large[:2] == ({PYTORCHJOB: 2, "v1/pods": 1}, 3 * PAGE)
    assert (small[2], large[2]) == (20, 400)
    assert large[3:] == ([f"job-{i:03d}" for i in (399, 398, 397, 396, 395)], 395)
    # The page after a cursor, and a status filter, keep their meaning.
    first = list_training_jobs(**K8S, limit=PAGE)
    rest = list_training_jobs(**K8S, limit=PAGE, cursor=first.next_cursor)
    assert [j.job_name for j in rest.jobs] == [f"job-{i:03d}" for i in (394, 393, 392, 391, 390)]
    assert list_training_jobs(**K8S, status="running").jobs == []
    # A status filter reads whole jobs, JOB_CHUNK a request, holding one chunk at a time.
    lists, whole, keys, names, more = page_cost(kube_api, status="succeeded")
    assert lists == {PYTORCHJOB: -(-400 // JOB_CHUNK), "v1/pods": 1}
    assert (whole, keys, len(names), more) == (400 + 2 * PAGE, 0, PAGE, 395)


def test_past_one_chunk_the_keys_list_continues(kube_api):
    kube_api.reset()
    count = LIST_CHUNK + 3
    for i in range(count):
        seed_job(kube_api, f"job-{i:04d}", i)
    lists, whole, keys, names, more = page_cost(kube_api)
    assert lists == {PYTORCHJOB: 2 + 1, "v1/pods": 1}
    assert (whole, keys) == (3 * PAGE, count)
    assert names[0] == f"job-{count - 1:04d}" and more == count - PAGE


def test_a_model_server_page_is_sent_its_own_services_only(kube_api):
    kube_api.reset()

    def seed(count: int) -> None:
        for i in range(count):
            name = f"srv-{i:04d}"
            meta = {"name": name, "namespace": "default", "labels": server_labels(name)}
            kube_api.emulator.objects["apps/v1/deployments", "default", name] = {
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
                "spec": {"replicas": 1}, "status": {"readyReplicas": 1, "replicas": 1},
            }  # fmt: skip
            kube_api.emulator.objects["v1/services", "default", name] = {
                "apiVersion": "v1", "kind": "Service", "metadata": meta,
                "spec": {"type": "ClusterIP", "ports": [{"port": 8000}]},
            }  # fmt: skip

    sent = []
    for count in (20, 400):
        seed(count)
        kube_api.emulator.lists.clear()
        kube_api.emulator.listed_objects = 0
        page = list_model_servers(**K8S, limit=PAGE)
        assert [s.name for s in page.servers] == [f"srv-{i:04d}" for i in range(PAGE)]
        assert page.more == count - PAGE
        services = kube_api.emulator.listed_objects - count  # the rest were Deployments
        sent.append((dict(kube_api.emulator.lists), services))
    assert sent[0] == sent[1] == ({"apps/v1/deployments": 1, "v1/services": 1}, PAGE)
