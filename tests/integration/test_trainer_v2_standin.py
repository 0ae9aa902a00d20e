"""The Kubeflow Trainer v2.3.0 / JobSet v0.12.0 stand-in (tests/services/trainer_v2.py,
jobset.py, trainer_v2_render.py) against upstream's behaviour: discovery serves the
engines a test installs; a TrainJob made by hand (a plain dict) becomes a JobSet, a Job
and pods named, labelled and given the env as upstream's source does; the pods really
run the trainer (2 nodes rendezvous through PET_MASTER_ADDR) to Complete; a failing
command ends Failed with JobSet's reason; suspend stops the pods and resume recreates
them; deleting the TrainJob deletes what it owns."""

from __future__ import annotations

import json
import sys
import time
import urllib.request
from typing import Any

import pytest

from tests.services.jobset import JOB, JOBSET, POD, SERVICE, Api
from tests.services.kube import PYTORCHJOB
from tests.services.trainer_v2 import (
    CRD,
    TRAINJOB,
    TrainerV2,
    serve_engines,
)

pytestmark = pytest.mark.integration

NS = "default"
TRAIN = ["torchrun", "-m", "trainer", "--model_type", "debug", "--max_steps", "4",
         "--checkpoint_freq", "2", "--log_freq", "1"]  # fmt: skip


def trainjob(name: str, command: list[str], *, nodes: int = 1, **spec: Any) -> dict[str, Any]:
    """A TrainJob as a user writes one, on upstream's torch-distributed runtime."""
    trainer = {"numNodes": nodes, "command": command,
               "resourcesPerNode": {"limits": {"cpu": "1"}}}  # fmt: skip
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "trainer": trainer, **spec},
    }


def events(log: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.splitlines() if line.startswith('{"event"')]


def pod_log(api: Api, pod: str) -> str:
    return api.core.read_namespaced_pod_log(pod, NS)


def until(check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout}s")


# discovery -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("v1", "v2"), [(True, False), (False, True), (True, True), (False, False)],
    ids=["v1 alone", "v2 alone", "both", "neither"],
)  # fmt: skip
def test_discovery_lists_the_engines_a_test_installs(kube_api, v1, v2):
    kube_api.reset()
    serve_engines(kube_api, v1=v1, v2=v2)
    with urllib.request.urlopen(f"{kube_api.url}/apis") as response:  # noqa: S310 (kmock)
        groups = {g["name"] for g in json.load(response)["groups"]}
    assert ("trainer.kubeflow.org" in groups, "jobset.x-k8s.io" in groups) == (v2, v2)
    assert ("kubeflow.org" in groups) == v1
    api = Api(str(kube_api.kubeconfig))
    crds = {c["metadata"]["name"] for c in api.list(CRD, None)}
    assert ("trainjobs.trainer.kubeflow.org" in crds) == v2
    assert ("jobsets.jobset.x-k8s.io" in crds) == v2
    runtimes = api.list("trainer.kubeflow.org/v1alpha1/clustertrainingruntimes", None)
    assert [r["metadata"]["name"] for r in runtimes] == (["torch-distributed"] if v2 else [])
    if not v1:
        assert PYTORCHJOB not in {str(r) for r in kube_api.emulator.resources}


# a 2-node TrainJob, run for real -------------------------------------------------------------


@pytest.fixture(scope="module")
def trained(kube_api, tmp_path_factory) -> dict[str, Any]:
    """One 2-node TrainJob of the debug model, run to its end; what the API then holds."""
    kube_api.reset()
    serve_engines(kube_api, v1=False, v2=True)
    root = tmp_path_factory.mktemp("cluster")
    trainer = TrainerV2(kube_api, root=root)
    trainer.add_nodes("g5.12xlarge", 2, gpus=4)
    api = trainer.api
    command = [*TRAIN, "--checkpoint_dir", str(root / "ckpt")]
    api.create(TRAINJOB, NS, trainjob("tiny", command, nodes=2))
    try:
        outcome = trainer.train("tiny").wait(240)
        pods = trainer.pods("tiny")
        return {
            "outcome": outcome, "errors": trainer.errors,
            "trainjob": trainer.trainjob("tiny"), "jobset": api.get(JOBSET, NS, "tiny"),
            "jobs": [j for j in api.list(JOB, NS)], "pods": pods,
            "service": api.get(SERVICE, NS, "tiny"),
            "logs": [pod_log(api, p["metadata"]["name"]) for p in pods],
        }  # fmt: skip
    finally:
        trainer.stop()


def test_two_nodes_train_to_complete_with_jobsets_reason(trained):
    assert trained["outcome"] == "Complete", trained
    assert trained["errors"] == []
    status = trained["trainjob"]["status"]
    complete = [c for c in status["conditions"] if c["type"] == "Complete"]
    assert [(c["status"], c["reason"], c["message"]) for c in complete] == [
        ("True", "AllJobsCompleted", "jobset completed successfully")]  # fmt: skip
    assert status["jobsStatus"] == [{"name": "node", "ready": 0, "succeeded": 1, "failed": 0,
                                     "active": 0, "suspended": 0}]  # fmt: skip
    rank0, rank1 = (events(log) for log in trained["logs"])
    assert rank0[0]["event"] == "start" and rank0[0]["world_size"] == 2
    assert [e["step"] for e in rank0 if e["event"] == "checkpoint_saved"] == [2, 4]
    assert rank0[-1]["event"] == "summary" and rank1 == []  # rank 1 prints no events


def test_names_labels_and_owners_are_upstreams(trained):
    trainjob, jobset, service = trained["trainjob"], trained["jobset"], trained["service"]
    assert jobset["metadata"]["ownerReferences"][0]["uid"] == trainjob["metadata"]["uid"]
    assert jobset["spec"]["network"]["enableDNSHostnames"] is True
    (job,) = trained["jobs"]
    assert job["metadata"]["name"] == "tiny-node-0"
    # The runtime's replicated-job labels are the Job's (jobset_controller constructJob).
    assert job["metadata"]["labels"]["trainer.kubeflow.org/trainjob-ancestor-step"] == "trainer"
    assert (job["spec"]["parallelism"], job["spec"]["completions"]) == (2, 2)
    assert job["spec"]["completionMode"] == "Indexed"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"jobset.sigs.k8s.io/jobset-name": "tiny"}
    for index, pod in enumerate(trained["pods"]):
        name, labels = pod["metadata"]["name"], pod["metadata"]["labels"]
        assert name.startswith(f"tiny-node-0-{index}-") and len(name) == len("tiny-node-0-0-") + 5
        assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (
            f"tiny-node-0-{index}",
            "tiny",
        )
        assert labels["jobset.sigs.k8s.io/jobset-name"] == "tiny"
        assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
        assert labels["jobset.sigs.k8s.io/job-index"] == "0"
        assert labels["batch.kubernetes.io/job-completion-index"] == str(index)
        assert pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == str(
            index
        )
        assert pod["metadata"]["ownerReferences"][0]["name"] == "tiny-node-0"
        assert pod["status"]["phase"] == "Succeeded"


def test_the_env_is_what_the_torch_plugin_injects(trained):
    container = trained["pods"][0]["spec"]["containers"][0]
    assert container["name"] == "node"
    assert container["ports"] == [{"containerPort": 29500}]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["PET_NNODES"] == "2"
    assert env["PET_NPROC_PER_NODE"] == "1"  # no GPU in resourcesPerNode: its 1 CPU
    assert env["PET_NODE_RANK"] == {
        "fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        }
    }
    assert env["PET_MASTER_ADDR"] == "tiny-node-0-0.tiny"
    assert env["PET_MASTER_PORT"] == "29500"


# failure, suspend, deletion ---------------------------------------------------------------------


def test_a_failing_command_fails_the_trainjob_after_the_backoff_limit(trainer_v2):
    trainer_v2.add_nodes("g5.12xlarge", 1, gpus=4)
    fail = [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"]
    trainer_v2.api.create(TRAINJOB, NS, trainjob("bad", fail))
    assert trainer_v2.train("bad").wait(120) == "Failed"
    failed = [
        c for c in trainer_v2.trainjob("bad")["status"]["conditions"] if c["type"] == "Failed"
    ]
    assert [(c["reason"], c["message"]) for c in failed] == [
        (
            "FailedJobs",
            "jobset failed due to one or more job failures (first failed job: bad-node-0)",
        )
    ]
    (pod,) = trainer_v2.pods("bad")
    (state,) = pod["status"]["containerStatuses"]
    # restartPolicy OnFailure (JobSet's default) and backoffLimit 6 (the Job's default):
    # the container ran 7 times, each run's exit code 3.
    assert state["restartCount"] == 6 and state["state"]["terminated"]["exitCode"] == 3
    assert pod["status"]["phase"] == "Failed"
    assert pod_log(trainer_v2.api, pod["metadata"]["name"]) == "boom\n"
    job = trainer_v2.api.get(JOB, NS, "bad-node-0")
    assert [(c["type"], c["reason"]) for c in job["status"]["conditions"]] == [
        ("Failed", "BackoffLimitExceeded")
    ]


def test_suspend_stops_the_pods_resume_recreates_them_and_delete_cascades(trainer_v2):
    trainer_v2.add_nodes("g5.12xlarge", 2, gpus=4)
    api = trainer_v2.api
    sleep = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"]
    api.create(TRAINJOB, NS, trainjob("idle", sleep, nodes=2))
    trainer_v2.train("idle")

    def running() -> list[str]:
        pods = trainer_v2.pods("idle")
        up = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"]
        return up if len(up) == 2 else []

    first = until(running)
    api.patch(TRAINJOB, NS, "idle", {"spec": {"suspend": True}})
    until(lambda: not trainer_v2.pods("idle"))
    assert not trainer_v2.cluster.kubelet.running
    job = until(lambda: _suspended(trainer_v2.trainjob("idle")))
    assert (job["reason"], job["message"]) == ("Suspended", "TrainJob is suspended")
    assert api.get(JOBSET, NS, "idle")["spec"]["suspend"] is True
    assert api.get(JOB, NS, "idle-node-0")["spec"]["suspend"] is True

    api.patch(TRAINJOB, NS, "idle", {"spec": {"suspend": False}})
    second = until(running)
    assert not set(first) & set(second)  # new pods
    resumed = [c for c in trainer_v2.trainjob("idle")["status"]["conditions"]
               if c["type"] == "Suspended"]  # fmt: skip
    assert [(c["status"], c["reason"], c["message"]) for c in resumed] == [
        ("False", "Resumed", "TrainJob is resumed")]  # fmt: skip

    api.delete(TRAINJOB, NS, "idle")
    until(lambda: not api.list(POD, NS) and not api.list(JOB, NS) and not api.list(JOBSET, NS)
          and api.get(SERVICE, NS, "idle") is None)  # fmt: skip
    assert not trainer_v2.cluster.kubelet.running


def _suspended(trainjob: dict[str, Any]) -> dict[str, Any] | None:
    for item in trainjob.get("status", {}).get("conditions", []):
        if item["type"] == "Suspended" and item["status"] == "True":
            return item
    return None


def test_a_replayed_run_fails_without_a_process(trainer_v2):
    trainer_v2.add_nodes("g5.12xlarge", 2, gpus=4)
    trainer_v2.api.create(TRAINJOB, NS, trainjob("replay", ["torchrun"], nodes=2))
    pods = trainer_v2.run("replay", outcome="Failed", exit_codes={"node-0-1": 2})
    assert len(pods) == 2 and not trainer_v2.cluster.kubelet.running
    job = trainer_v2.trainjob("replay")
    assert [c["type"] for c in job["status"]["conditions"]] == ["Failed"]
    codes = [p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"]
             for p in trainer_v2.pods("replay")]  # fmt: skip
    assert codes == [0, 2]
