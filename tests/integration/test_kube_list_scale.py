"""Issue 49 item 2: the Kubernetes lists ask the API server (kmock, which honours
labelSelector, limit and continue as the API server does) for what a page needs. What
a page is sent does not grow with the namespace: other users' jobs, pods and objects are
never sent, and only the page's own pods and Services are."""

from __future__ import annotations

import pytest

from commands.list_model_servers import list_model_servers
from commands.list_training_jobs import list_training_jobs
from skills.kube.client import LIST_CHUNK
from skills.kube.pods import JOB_NAME_LABEL
from skills.model_server.kubernetes.manifest import labels as server_labels
from skills.shared.ownership import managed_labels
from skills.training_job_deployer.targets.kubernetes.manifest import LABEL_JOB
from tests.services.kube import PYTORCHJOB

pytestmark = pytest.mark.integration

K8S = {"target": "kubernetes"}
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


def page_cost(kube, **args) -> tuple[dict[str, int], int, list[str], int | None]:
    """(LISTs by resource, objects served, the jobs listed, more) of one page."""
    kube.emulator.lists.clear()
    kube.emulator.listed_objects = 0
    page = list_training_jobs(**K8S, limit=PAGE, **args)
    return (dict(kube.emulator.lists), kube.emulator.listed_objects,
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
    lists, served, names, more = large
    assert lists == {PYTORCHJOB: 1, "v1/pods": 1}
    assert served == 20 + 2 * PAGE  # the suite's jobs, the page's pods
    assert names == [f"ours-{i:03d}" for i in (19, 18, 17, 16, 15)] and more == 15


def test_the_suites_own_jobs_are_read_in_chunks_and_only_the_pages_pods_are_sent(kube_api):
    """20 then 400 of the suite's jobs: the same requests, the same pods sent (the page's);
    the jobs are read in chunks of LIST_CHUNK (the API server has no order by creation
    time: a newest-first page reads every job's key, keeping only the page)."""
    kube_api.reset()
    for i in range(20):
        seed_job(kube_api, f"job-{i:03d}", i)
    small = page_cost(kube_api)
    for i in range(20, 400):
        seed_job(kube_api, f"job-{i:03d}", i)
    large = page_cost(kube_api)
    assert small[0] == large[0] == {PYTORCHJOB: 1, "v1/pods": 1}
    assert (small[1] - 20, large[1] - 400) == (2 * PAGE, 2 * PAGE)
    assert large[2] == [f"job-{i:03d}" for i in (399, 398, 397, 396, 395)]
    assert large[3] == 395
    # The page after a cursor, and a status filter, keep their meaning.
    first = list_training_jobs(**K8S, limit=PAGE)
    rest = list_training_jobs(**K8S, limit=PAGE, cursor=first.next_cursor)
    assert [j.job_name for j in rest.jobs] == [f"job-{i:03d}" for i in (394, 393, 392, 391, 390)]
    assert list_training_jobs(**K8S, status="running").jobs == []


def test_past_one_chunk_the_jobs_list_continues(kube_api):
    kube_api.reset()
    count = LIST_CHUNK + 3
    for i in range(count):
        seed_job(kube_api, f"job-{i:04d}", i)
    lists, served, names, more = page_cost(kube_api)
    assert lists == {PYTORCHJOB: 2, "v1/pods": 1}
    assert served == count + 2 * PAGE
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
