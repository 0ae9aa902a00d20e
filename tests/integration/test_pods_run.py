"""PyTorchJobs the kubernetes target renders, run for real by the cluster stand-in
(tests/services/training_operator.py `train`, tests/services/kubelet.py): 2 pods on CPU
rendezvous through the rendered c10d endpoint mapped to loopback, checkpoint to a
claim, and a resubmitted job (one pod) resumes from both pods' shards; a crash after a
checkpoint fails the job and the retry resumes from that checkpoint (one job's three
attempts, which both tests read); a manifest that cannot train fails the job as it
would on a cluster; the env the operator injects is v1.9's."""

from __future__ import annotations

import json

import pytest

from commands.deploy_training_job import deploy_training_job
from commands.get_training_job import get_training_job
from commands.get_training_job_logs import get_training_job_logs
from tests.services.kube import PYTORCHJOB
from tests.services.training_operator import Injected, TrainingOperator, operator_env

pytestmark = pytest.mark.integration

IMAGE = "localhost:9/fsdp:v1"
K8S = {"target": "kubernetes"}
CLAIM = "fsx-claim"


@pytest.fixture
def operator(kube_api, tmp_path):
    kube_api.reset()
    operator = TrainingOperator(kube_api, root=tmp_path / "cluster")
    operator.add_nodes("g5.12xlarge", 2, gpus=4, efa=1)
    operator.add_claim(CLAIM)
    yield operator
    operator.stop()


def deploy(**kwargs):
    args = {"job_name": "tiny", "num_nodes": 2, "gpu_per_node": 1, "image_uri": IMAGE,
            "instance_type": "g5.12xlarge", "max_steps": 4, "checkpoint_freq": 2,
            "checkpoint_volume": f"pvc:{CLAIM}", "skip_gate": True, "wait_seconds": 0}  # fmt: skip
    args.update(kwargs)
    return deploy_training_job(**args)


def events(log: str) -> list[dict]:
    return [json.loads(line) for line in log.splitlines() if line.startswith('{"event"')]


def resumed_from(log: str) -> int | None:
    starts = [e for e in events(log) if e["event"] == "start"]
    loaded = [e["step"] for e in events(log) if e["event"] == "checkpoint_loaded"]
    assert len(starts) == 1 and loaded == ([starts[0]["resumed_from"]] if loaded else []), log
    return starts[0]["resumed_from"]


@pytest.fixture(scope="module")
def attempts(kube_api, tmp_path_factory) -> dict[str, tuple[str | None, str, str]]:
    """One job over three real attempts, each as a user resubmits it (replace=true): it
    trains to 4 on two pods (checkpoints 2, 4); resubmitted to 12 on one pod with a
    checkpoint every 6, it resumes from 4 (both pods' shards, read from the claim) and
    its master pod crashes after the next checkpoint (6: six steps before another, so
    the crash lands first even when this host's load delays the kill); the retry
    resumes from 6 to 12. The resumes, not their world size, are what the later
    attempts prove, and each pod costs two torch starts (torchrun and its rank).
    {attempt: (the run's outcome, get_training_job's status, the job's log)}, read
    before the next attempt replaces the job."""
    kube_api.reset()
    operator = TrainingOperator(kube_api, root=tmp_path_factory.mktemp("cluster"))
    operator.add_nodes("g5.12xlarge", 2, gpus=4, efa=1)
    operator.add_claim(CLAIM)
    crash = Injected("master-0", after="checkpoint_saved", log="Killed: OOM (injected)\n")
    again = {"max_steps": 12, "checkpoint_freq": 6, "num_nodes": 1, "replace": True,
             "confirm": True}  # fmt: skip
    plan = {"first": ({}, None), "resubmitted": (again, crash), "retry": (again, None)}
    seen: dict[str, tuple[str | None, str, str]] = {}
    try:
        for attempt, (kwargs, inject) in plan.items():
            deploy(**kwargs)
            outcome = operator.train("tiny", inject=inject).wait()
            status = get_training_job(job_name="tiny", **K8S, wait_seconds=0).status
            seen[attempt] = (outcome, status, get_training_job_logs(job_name="tiny", **K8S).text)
            if attempt == "first":  # on the claim, where every pod of the next attempt looks
                assert (operator.root / "claims" / CLAIM / "tiny" / "step-4").is_dir()
    finally:
        operator.stop()
    return seen


def test_two_pods_train_checkpoint_and_a_resubmitted_job_resumes(attempts):
    outcome, status, log = attempts["first"]
    assert outcome == "Succeeded" and status == "succeeded", (outcome, status)
    first = events(log)
    start = first[0]
    assert start["event"] == "start" and start["world_size"] == 2 and start["resumed_from"] is None
    saved = [e["step"] for e in first if e["event"] == "checkpoint_saved"]
    assert saved == [2, 4]
    # The resubmitted job starts from the claim's step 4, not from scratch: its one pod
    # loads the shards both pods saved there (DCP reshards them to its world of one).
    _, _, log = attempts["resubmitted"]
    assert [e["world_size"] for e in events(log) if e["event"] == "start"] == [1]
    assert resumed_from(log) == 4
    assert [e["step"] for e in events(log) if e["event"] == "step"][0] == 5


def test_a_crash_after_a_checkpoint_then_the_retry_resumes_from_it(attempts):
    outcome, status, log = attempts["resubmitted"]
    assert outcome == "Failed" and status == "failed", (outcome, status)
    assert log.rstrip().endswith("Killed: OOM (injected)")
    assert [e["step"] for e in events(log) if e["event"] == "checkpoint_saved"] == [6]
    outcome, status, log = attempts["retry"]
    assert outcome == "Succeeded" and status == "succeeded", (outcome, status)
    assert resumed_from(log) == 6
    steps = [e["step"] for e in events(log) if e["event"] == "step"]
    assert steps and min(steps) == 7 and steps[-1] == 12, steps


def test_a_manifest_that_cannot_train_fails_the_job(operator, kube_api):
    # A dataset path no pod has: the real trainer exits non-zero. One pod: the failure,
    # not the world size, is the subject (the attempts fixture trains 2-pod worlds).
    deploy(dataset="/data/missing.jsonl", num_nodes=1)
    assert operator.train("tiny").wait() == "Failed"
    failed = get_training_job(job_name="tiny", **K8S, wait_seconds=0)
    assert failed.status == "failed", failed
    pod = kube_api.emulator.objects["v1/pods", "default", "tiny-master-0"].raw
    state = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert state["exitCode"] != 0


def test_a_missing_claim_leaves_the_pods_pending(operator, kube_api):
    deploy(checkpoint_volume="pvc:nowhere")
    run = operator.train("tiny")
    assert run.wait(timeout=3) is None  # still waiting to be scheduled
    pod = kube_api.emulator.objects["v1/pods", "default", "tiny-master-0"].raw
    assert pod["status"]["phase"] == "Pending"
    reasons = [o.raw["reason"] for k, o in kube_api.emulator.objects.items()
               if k[0] == "v1/events"]  # fmt: skip
    assert "FailedScheduling" in reasons


@pytest.mark.parametrize(
    ("layout", "kind", "index", "expected"),
    [
        ({"Master": 1, "Worker": 1}, "Master", 0,
         {"MASTER_ADDR": "j-master-0", "MASTER_PORT": "23456", "WORLD_SIZE": "4", "RANK": "0",
          "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "0", "PET_NNODES": "2"}),
        ({"Master": 1, "Worker": 1}, "Worker", 0,
         {"RANK": "1", "PET_NODE_RANK": "1", "WORLD_SIZE": "4", "PET_NNODES": "2"}),
        ({"Worker": 2}, "Worker", 1,
         {"PET_RDZV_ENDPOINT": "j-worker-0:29400", "PET_RDZV_BACKEND": "c10d",
          "PET_NNODES": "1:3", "PET_RDZV_ID": "j", "PET_MAX_RESTARTS": "0"}),
    ],
)  # fmt: skip
def test_the_operator_env_is_v1_9s(layout, kind, index, expected):
    template = {"spec": {"containers": [{"name": "pytorch", "ports": [
        {"name": "pytorchjob-port", "containerPort": 23456}]}]}}  # fmt: skip
    job = {"metadata": {"name": "j"}, "spec": {"nprocPerNode": "2", "pytorchReplicaSpecs": {
        k: {"replicas": n, "template": template} for k, n in layout.items()}}}  # fmt: skip
    if "Master" not in layout:
        job["spec"]["elasticPolicy"] = {"rdzvBackend": "c10d", "rdzvHost": "j-worker-0",
                                        "rdzvPort": 29400, "rdzvId": "j", "minReplicas": 1,
                                        "maxReplicas": 3, "maxRestarts": 0}  # fmt: skip
    env = {e["name"]: e["value"] for e in operator_env(job, kind, index)}
    assert env["PYTHONUNBUFFERED"] == "0"
    assert {k: env.get(k) for k in expected} == expected
    if "Master" not in layout:
        assert "MASTER_ADDR" not in env and "RANK" not in env
    assert PYTORCHJOB  # the kind the operator plays
