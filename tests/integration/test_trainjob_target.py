"""Issue 47: the Kubernetes target's TrainJob engine on the kmock API server with the
vendored Kubeflow Trainer v2.3.0 and JobSet v0.12.0 CRDs served (tests/services/crds.py),
the test playing Trainer's controller by writing the TrainJob's status and its JobSet
pods as upstream does. Deploy picks the engine by what the cluster serves; the job
tools find a job whichever kind it is; get and list read progress from
status.trainerStatus, a list page in a constant number of requests and no log read."""

from __future__ import annotations

import functools
import gzip
from pathlib import Path
from typing import Any

import pytest
import yaml

from commands.cancel_training_job import cancel_training_job
from commands.delete_training_job import delete_training_job
from commands.deploy_training_job import deploy_training_job
from commands.get_training_job import get_training_job
from commands.get_training_job_logs import get_training_job_logs
from commands.list_training_jobs import list_training_jobs
from skills.kube.pods import COMPLETION_INDEX, JOBSET_NAME_LABEL, REPLICATED_JOB_LABEL
from skills.shared.errors import ToolFailure
from skills.shared.ownership import managed_labels
from skills.training_job_deployer.targets.base import JobPage
from skills.training_job_deployer.targets.kubernetes.kube_monitor import LABEL_JOB
from skills.training_job_deployer.targets.kubernetes.settings import KubernetesSettings
from skills.training_job_deployer.targets.kubernetes.target import KubernetesTarget
from skills.training_job_deployer.targets.trainjob import manifest as tm
from tests.services import crds
from tests.services.kube import PYTORCHJOB
from tests.services.training_operator import RUN_LOG

pytestmark = pytest.mark.integration

VENDORED = Path("skills/training_job_deployer/targets/trainjob/crds")
TRAINJOBS = "trainer.kubeflow.org/v1alpha1/trainjobs"
RUNTIMES = "trainer.kubeflow.org/v1alpha1/clustertrainingruntimes"
K8S: dict[str, Any] = {"target": "kubernetes"}
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/fsdp:v1"


@functools.cache
def _crd(name: str) -> dict:
    text = gzip.decompress((VENDORED / name).read_bytes())
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506


def install_trainer(kube) -> None:
    for name in (
        "trainer.kubeflow.org_trainjobs.v2.3.0.yaml.gz",
        "trainer.kubeflow.org_clustertrainingruntimes.v2.3.0.yaml.gz",
        "jobset.x-k8s.io_jobsets.v0.12.0.yaml.gz",
    ):
        crds.serve(kube.emulator, _crd(name))


@pytest.fixture
def v2(kube_api):
    """A cluster serving Kubeflow Trainer v2 alone (the Training Operator's CRD gone)."""
    kube_api.reset()
    crds.withdraw(kube_api.emulator, PYTORCHJOB)
    install_trainer(kube_api)
    return kube_api


def deploy(**kwargs):
    args = {"job_name": "llama", "num_nodes": 2, "gpu_per_node": 8, "image_uri": IMAGE,
            "max_steps": 6, "wait_seconds": 0, "skip_gate": True, "monitor": False,
            **K8S}  # fmt: skip
    args.update(kwargs)
    return deploy_training_job(**args)


def trainjob(kube, name: str = "llama") -> dict:
    return kube.emulator.objects[TRAINJOBS, "default", name].raw


def set_status(kube, name: str, **status: Any) -> None:
    """What Trainer's controller writes: conditions, and trainerStatus when posted."""
    job = dict(trainjob(kube, name))
    job["status"] = {**(job.get("status") or {}), **status}
    kube.emulator.objects[TRAINJOBS, "default", name] = job


def jobset_pod(kube, job: str, rank: int, suffix: str, *, phase: str = "Running") -> str:
    """Node `rank`'s pod as the Job controller names and labels it (a random suffix)."""
    name = f"{tm.pod_name_prefix({'metadata': {'name': job}}, rank)}-{suffix}"
    kube.emulator.objects["v1/pods", "default", name] = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default",
                     "labels": {JOBSET_NAME_LABEL: job, REPLICATED_JOB_LABEL: "node"},
                     "annotations": {COMPLETION_INDEX: str(rank)}},
        "spec": {"containers": [{"name": "node"}], "nodeName": f"node-{rank}"},
        "status": {"phase": phase, "containerStatuses": [
            {"name": "node", "ready": True, "state": {"running": {}}}]},
    }  # fmt: skip
    return name


TRAINER_STATUS = {
    "progressPercentage": 50,
    "estimatedRemainingSeconds": 30,
    "lastUpdatedTime": "2026-12-06T09:00:00Z",
    "metrics": [{"name": "step", "value": "3"}, {"name": "loss", "value": "5.25"},
                {"name": "tokens_per_s", "value": "900"}, {"name": "mfu", "value": "0.4"}],
}  # fmt: skip
RUNNING: list[dict[str, str]] = []  # Trainer v2.3.0 sets no Created/Running condition


def test_auto_picks_trainjob_where_v2_is_served_pytorchjob_where_only_v1_and_neither_is_refused(
    kube_api,
):
    kube_api.reset()
    assert deploy(dry_run=True).plan.engine == "pytorchjob"  # only v1: as before
    install_trainer(kube_api)  # both: Trainer v2, upstream's current engine
    planned = deploy(dry_run=True)
    assert planned.plan.engine == "trainjob" and planned.plan.manifest["kind"] == "TrainJob"
    assert [c["kind"] for c in planned.plan.companions] == ["ClusterTrainingRuntime"]
    assert planned.plan.log_path == "pod/llama-node-0-0-* -n default"
    forced = deploy(dry_run=True, engine="pytorchjob")
    assert forced.plan.manifest["kind"] == "PyTorchJob"
    crds.withdraw(kube_api.emulator, PYTORCHJOB)
    crds.withdraw(kube_api.emulator, TRAINJOBS)
    with pytest.raises(ToolFailure) as neither:
        deploy(dry_run=True)
    assert neither.value.code == "training_operator_missing"
    assert "manage_eks_cluster action=auto_fix" in neither.value.hint
    with pytest.raises(ToolFailure) as forced_v2:
        deploy(engine="trainjob")
    assert "manage_eks_cluster action=auto_fix" in forced_v2.value.hint


def test_submit_installs_the_runtime_once_creates_exactly_the_plan_and_refuses_anothers(v2):
    planned = deploy(dry_run=True, queue="team-a")
    started = deploy(queue="team-a")
    assert started.status == "running" and started.engine == "trainjob"
    created = trainjob(v2)
    assert created["spec"] == planned.plan.manifest["spec"]
    assert created["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    runtime = v2.emulator.objects[RUNTIMES, None, tm.RUNTIME].raw
    assert runtime["spec"] == tm.cluster_runtime()["spec"]
    version = runtime["metadata"]["resourceVersion"]
    deploy(job_name="second")  # the runtime is the same: not written again
    assert v2.emulator.objects[RUNTIMES, None, tm.RUNTIME].raw["metadata"]["resourceVersion"] == (
        version
    )
    # Someone else's runtime of that name is theirs: refused, untouched, no job created.
    theirs = {**runtime, "metadata": {"name": tm.RUNTIME, "labels": {"team": "ml"}}}
    v2.emulator.objects[RUNTIMES, None, tm.RUNTIME] = theirs
    with pytest.raises(ToolFailure) as refused:
        deploy(job_name="third")
    assert refused.value.code == "not_ours"
    assert (TRAINJOBS, "default", "third") not in v2.emulator.objects


def test_get_reads_step_and_loss_from_trainer_status_without_reading_a_log(v2):
    deploy()
    rank1 = jobset_pod(v2, "llama", 1, "aaaaa")
    rank0 = jobset_pod(v2, "llama", 0, "zzzzz")
    v2.set_pod_log("default", rank1, "[rank1]: worker started\n")
    v2.set_pod_log("default", rank0, RUN_LOG)
    set_status(v2, "llama", conditions=RUNNING, trainerStatus=TRAINER_STATUS)
    target = KubernetesTarget(KubernetesSettings())
    state = target.describe("llama")
    assert (state.engine, state.status, state.steps, state.max_steps) == ("trainjob", "running",
                                                                        3, 6)  # fmt: skip
    assert (state.last_loss, state.tokens_per_s, state.eta_s) == (5.25, 900.0, 30)
    assert state.log_path == f"pod/{rank0} -n default"
    assert not [p for p in target.client.paths if p.endswith("/log")], target.client.paths
    # No trainerStatus (the feature gate off): rank 0's log, found by its completion index.
    set_status(v2, "llama", trainerStatus=None)
    fallback = KubernetesTarget(KubernetesSettings()).describe("llama")
    assert (fallback.steps, fallback.max_steps) == (6, 6) and fallback.last_loss is not None
    logs = get_training_job_logs(job_name="llama", replica="node-1", **K8S)
    assert logs.text == "[rank1]: worker started"


def test_cancel_suspends_a_trainjob_and_failed_and_complete_read_as_such(v2):
    deploy()
    set_status(v2, "llama", conditions=RUNNING)
    cancelled = cancel_training_job(job_name="llama", confirm=True, **K8S)
    assert trainjob(v2)["spec"]["suspend"] is True
    assert cancelled.status == "cancelled" and cancelled.engine == "trainjob"
    deploy(job_name="broken")
    failed = [{"type": "Failed", "status": "True", "reason": "FailedJobs",
               "message": "jobset failed: job broken-node-0 failed"}]  # fmt: skip
    set_status(v2, "broken", conditions=failed)
    state = get_training_job(job_name="broken", **K8S)
    assert state.status == "failed" and state.conditions == ["Failed"]
    assert state.next_step is not None and state.next_step.tool == "diagnose_training_job"
    deploy(job_name="done")
    set_status(v2, "done", conditions=[{"type": "Complete", "status": "True"}],
               trainerStatus={**TRAINER_STATUS, "progressPercentage": 100,
                              "metrics": [{"name": "step", "value": "6"}]})  # fmt: skip
    assert get_training_job(job_name="done", **K8S).status == "succeeded"


def seed_trainjob(kube, name: str, second: int) -> None:
    """A TrainJob that is training (created at `second`), with trainerStatus and two pods."""
    kube.emulator.objects[TRAINJOBS, "default", name] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "default",
                     "labels": managed_labels(**{LABEL_JOB: name}),
                     "creationTimestamp": f"2026-01-01T{second // 3600:02d}:"
                                          f"{second // 60 % 60:02d}:{second % 60:02d}Z"},
        "spec": {"runtimeRef": {"name": tm.RUNTIME},
                 "trainer": {"numNodes": 2, "command": ["torchrun", "--max_steps", "6"]}},
        "status": {"conditions": RUNNING, "trainerStatus": TRAINER_STATUS},
    }  # fmt: skip
    for rank in (0, 1):
        jobset_pod(kube, name, rank, f"x{rank}xxx")


def page_cost(count: int, kube) -> tuple[int, int, list[str]]:
    """(requests, log reads, jobs listed) of one page of 5 over `count` TrainJobs."""
    for i in range(count):
        seed_trainjob(kube, f"tj-{i:03d}", i)
    target = KubernetesTarget(KubernetesSettings())
    page = target.list_jobs(JobPage(limit=5))
    logs = [p for p in target.client.paths if p.endswith("/log")]
    assert all(j.engine == "trainjob" and (j.steps, j.last_loss) == (3, 5.25) for j in page.items)
    return target.client.calls, len(logs), [j.job_name for j in page.items]


def test_a_page_over_200_trainjobs_is_as_many_requests_as_over_2_and_reads_no_log(v2):
    small = page_cost(2, v2)
    v2.reset()
    crds.withdraw(v2.emulator, PYTORCHJOB)
    install_trainer(v2)
    large = page_cost(200, v2)
    assert small[:2] == large[:2] and large[1] == 0, (small, large)
    assert large[2] == [f"tj-{i:03d}" for i in (199, 198, 197, 196, 195)]
    listed = list_training_jobs(**K8S, limit=2)
    assert [(j.job_name, j.steps, j.max_steps) for j in listed.jobs] == [
        ("tj-199", 3, 6), ("tj-198", 3, 6)]  # fmt: skip


def test_a_cluster_serving_both_lists_both_kinds_each_saying_its_engine(kube_api):
    kube_api.reset()
    install_trainer(kube_api)
    deploy(job_name="old", engine="pytorchjob")
    deploy(job_name="new")  # auto: a TrainJob
    listed = {j.job_name: j.engine for j in list_training_jobs(**K8S).jobs}
    assert listed == {"old": "pytorchjob", "new": "trainjob"}
    assert get_training_job(job_name="old", **K8S).engine == "pytorchjob"
    assert get_training_job(job_name="new", **K8S).engine == "trainjob"


@pytest.mark.parametrize("kind", ["TrainJob", "PyTorchJob"])
def test_a_job_the_suite_did_not_submit_is_neither_stopped_nor_deleted(kube_api, kind):
    kube_api.reset()
    install_trainer(kube_api)
    resource = TRAINJOBS if kind == "TrainJob" else PYTORCHJOB
    group = "trainer.kubeflow.org/v1alpha1" if kind == "TrainJob" else "kubeflow.org/v1"
    theirs = {"apiVersion": group, "kind": kind,
              "metadata": {"name": "theirs", "namespace": "default", "labels": {"team": "ml"}},
              "spec": {}}  # fmt: skip
    kube_api.emulator.objects[resource, "default", "theirs"] = theirs
    for call in (cancel_training_job, delete_training_job):
        with pytest.raises(ToolFailure) as refused:
            call(job_name="theirs", confirm=True, **K8S)
        assert refused.value.code == "not_ours" and kind in refused.value.message
    assert kube_api.emulator.objects[resource, "default", "theirs"].raw["spec"] == {}
