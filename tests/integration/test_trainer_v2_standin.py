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
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from tests.services.jobset import JOB, JOBSET, POD, SERVICE, Api
from tests.services.kube import PYTORCHJOB
from tests.services.trainer_v2 import (
    CRD,
    TRAINJOB,
    Injected,
    TrainerV2,
    serve_engines,
    torch_distributed,
)
from tests.services.trainer_v2_render import render_jobset

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
    assert not [k for k in env if k.startswith("KUBEFLOW_TRAINER_")]  # TrainJobStatus gate off


@pytest.mark.parametrize(
    ("trainer", "expected"),
    [
        ({"resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}}}, "auto"),
        ({"resourcesPerNode": {"limits": {"cpu": "4"}}}, "4"),
        ({"resourcesPerNode": {"requests": {"cpu": "500m"}}}, "1"),
        ({"resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}}, "numProcPerNode": 2}, "2"),
        ({}, "1"),
    ],
    ids=["GPUs leave it to torchrun (auto)", "no GPU: the CPU count",
         "under one CPU: at least 1", "numProcPerNode wins", "no resources: 1"],
)  # fmt: skip
def test_nproc_per_node_is_what_the_torch_plugin_computes(trainer, expected):
    job = trainjob("t", ["torchrun"])
    job["spec"]["trainer"] = {"command": ["torchrun"], **trainer}
    rendered = render_jobset(job, torch_distributed())
    container = rendered["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"
    ][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PET_NPROC_PER_NODE"] == expected
    assert env["PET_NNODES"] == "1"  # the runtime's mlPolicy.numNodes


def test_trainer_env_overrides_the_runtimes_in_place_before_the_pet_variables():
    runtime = torch_distributed()
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    runtime_env = [{"name": "A", "value": "runtime"}, {"name": "B", "value": "runtime"}]
    node["template"]["spec"]["containers"][0]["env"] = runtime_env
    job = trainjob("t", ["torchrun"], nodes=3)
    job["spec"]["trainer"]["env"] = [{"name": "B", "value": "job"}, {"name": "C", "value": "job"}]
    rendered = render_jobset(job, runtime)
    rjob = rendered["spec"]["replicatedJobs"][0]
    container = rjob["template"]["spec"]["template"]["spec"]["containers"][0]
    assert [(e["name"], e.get("value")) for e in container["env"]][:3] == [
        ("A", "runtime"), ("B", "job"), ("C", "job")]  # fmt: skip
    assert [e["name"] for e in container["env"]][3:] == [
        "PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "PET_MASTER_ADDR",
        "PET_MASTER_PORT"]  # fmt: skip
    assert (rjob["replicas"], rjob["template"]["spec"]["parallelism"]) == (1, 3)
    assert rendered["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"


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
    seen = {(e["involvedObject"]["kind"], e["reason"], e["type"])
            for e in trainer_v2.api.list("v1/events", NS)}  # fmt: skip
    assert seen >= {("Pod", "Scheduled", "Normal"), ("Pod", "BackOff", "Warning"),
                    ("Job", "BackoffLimitExceeded", "Warning"),
                    ("JobSet", "FailedJobs", "Warning")}  # fmt: skip


def test_a_runtime_deleted_under_a_trainjob_is_a_resources_creation_failed_event(trainer_v2):
    runtime = torch_distributed()
    runtime.update(kind="TrainingRuntime", metadata={"name": "gone", "namespace": NS})
    resource = "trainer.kubeflow.org/v1alpha1/trainingruntimes"
    trainer_v2.api.create(resource, NS, runtime)
    ref = {"name": "gone", "kind": "TrainingRuntime"}
    trainer_v2.api.create(TRAINJOB, NS, trainjob("orphan", ["torchrun"], runtimeRef=ref))
    trainer_v2.api.delete(resource, NS, "gone")
    trainer_v2.reconcile()
    trainer_v2.reconcile()
    (event,) = [e for e in trainer_v2.api.list("v1/events", NS)
                if e["reason"] == "TrainJobResourcesCreationFailed"]  # fmt: skip
    assert event["involvedObject"]["name"] == "orphan" and event["type"] == "Warning"
    assert event["message"] == (
        "TrainJob resources reconciliation failed: TrainingRuntime specified in TrainJob is "
        'not found: trainingruntimes.trainer.kubeflow.org "gone" not found'
    )
    assert trainer_v2.api.get(JOBSET, NS, "orphan") is None


def test_suspend_stops_the_pods_resume_recreates_them_and_delete_cascades(trainer_v2):
    trainer_v2.add_nodes("g5.12xlarge", 2, gpus=4)
    api = trainer_v2.api
    sleep = [sys.executable, "-c", "import os, time; print(os.environ['NODE_NAME'], "
             "os.environ['PET_NODE_RANK'], flush=True); time.sleep(600)"]  # fmt: skip
    job = trainjob("idle", sleep, nodes=2)
    node_name = {"fieldRef": {"fieldPath": "spec.nodeName"}}
    job["spec"]["trainer"]["env"] = [{"name": "NODE_NAME", "valueFrom": node_name}]
    api.create(TRAINJOB, NS, job)
    trainer_v2.train("idle")

    def running() -> list[str]:
        pods = trainer_v2.pods("idle")
        up = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"]
        return up if len(up) == 2 else []

    first = until(running)
    # The downward API as a kubelet resolves it: the node bound, the completion index.
    logs = until(lambda: all(pod_log(api, p) for p in first) and [pod_log(api, p) for p in first])
    nodes = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in trainer_v2.pods("idle")}
    assert [log.split() for log in logs] == [[nodes[p], str(i)] for i, p in enumerate(first)]
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


# the status server (TrainJobStatus feature gate on) ----------------------------------------------


def test_the_trainer_posts_progress_that_lands_in_trainer_status(trainer_v2_progress):
    trainer, server = trainer_v2_progress, trainer_v2_progress.status_server
    trainer.add_nodes("g5.12xlarge", 1, gpus=4)
    trainer.api.create(TRAINJOB, NS, trainjob("progress", TRAIN))
    assert trainer.train("progress").wait(240) == "Complete", trainer.errors
    status = (trainer.trainjob("progress") or {})["status"]
    (pod,) = trainer.pods("progress")
    assert status["trainerStatus"]["progressPercentage"] == 100, status
    metrics = {m["name"]: m["value"] for m in status["trainerStatus"]["metrics"]}
    assert metrics["step"] == "4" and float(metrics["loss"]) > 0
    assert [c["type"] for c in status["conditions"]] == ["Complete"]  # not clobbered, nor it
    posts = [code for method, _, code in server.requests if method == "POST"]
    assert posts and set(posts) == {200}
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["KUBEFLOW_TRAINER_SERVER_URL"] == server.url(NS, "progress")
    assert Path(env["KUBEFLOW_TRAINER_SERVER_TOKEN"]) == server.files(NS, "progress") / "token"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts["/var/run/secrets/kubeflow/trainer"] == "kubeflow-trainer-token"
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == "kubeflow-trainer-token"]
    token = volume["projected"]["sources"][0]["serviceAccountToken"]
    assert (
        token["audience"]
        == "trainer.kubeflow.org/v1alpha1/namespaces/default/trainjobs/progress/status"
    )


def test_a_post_replaces_trainer_status_whole_and_a_missing_trainjob_is_a_lookup_error(
    trainer_v2,
):
    trainer_v2.api.create(TRAINJOB, NS, trainjob("posted", ["torchrun"], suspend=True))
    first = {"progressPercentage": 10, "estimatedRemainingSeconds": 90,
             "metrics": [{"name": "loss", "value": "2.5"}],
             "lastUpdatedTime": "2026-01-01T00:00:00Z"}  # fmt: skip
    trainer_v2.write_trainer_status(NS, "posted", first)
    later = {"progressPercentage": 20, "lastUpdatedTime": "2026-01-01T00:00:05Z"}
    trainer_v2.write_trainer_status(NS, "posted", later)
    assert trainer_v2.trainjob("posted")["status"]["trainerStatus"] == later
    with pytest.raises(LookupError):
        trainer_v2.write_trainer_status(NS, "nowhere", later)


# an injected OOM kill ---------------------------------------------------------------------------

OOM = "torch.OutOfMemoryError: CUDA out of memory. (injected)\n"


def test_an_oom_kill_after_a_checkpoint_restarts_the_container_which_resumes(trainer_v2):
    # Upstream's runtime: JobSet's restartPolicy OnFailure and the Job's backoffLimit 6,
    # so the killed container restarts in its pod and resumes from its checkpoint.
    trainer_v2.add_nodes("g5.12xlarge", 1, gpus=4)
    command = [*TRAIN, "--max_steps", "6", "--checkpoint_dir", str(trainer_v2.root / "ckpt")]
    trainer_v2.api.create(TRAINJOB, NS, trainjob("oom", command))
    crash = Injected("node-0-0", after="checkpoint_saved", log=OOM)
    assert trainer_v2.train("oom", inject=crash).wait(240) == "Complete", trainer_v2.errors
    (pod,) = trainer_v2.pods("oom")
    (state,) = pod["status"]["containerStatuses"]
    assert state["restartCount"] == 1
    assert (state["lastState"]["terminated"]["exitCode"],
            state["lastState"]["terminated"]["reason"]) == (137, "OOMKilled")  # fmt: skip
    name = pod["metadata"]["name"]
    previous = trainer_v2.api.core.read_namespaced_pod_log(name, NS, previous=True)
    assert previous.endswith(OOM)
    (start,) = [e for e in events(pod_log(trainer_v2.api, name)) if e["event"] == "start"]
    assert start["resumed_from"] == 2


def test_an_oom_kill_fails_a_trainjob_whose_runtime_allows_no_retry(trainer_v2):
    # A TrainingRuntime of the namespace (runtimeRef kind TrainingRuntime) whose Job
    # template says backoffLimit 0 and restartPolicy Never, as a suite's own may.
    runtime = torch_distributed()
    runtime.update(kind="TrainingRuntime")
    runtime["metadata"] = {"name": "no-retry", "namespace": NS}
    job_spec = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    job_spec["backoffLimit"] = 0
    job_spec["template"]["spec"]["restartPolicy"] = "Never"
    trainer_v2.api.create("trainer.kubeflow.org/v1alpha1/trainingruntimes", NS, runtime)
    trainer_v2.add_nodes("g5.12xlarge", 1, gpus=4)
    command = [*TRAIN, "--max_steps", "40", "--checkpoint_dir", str(trainer_v2.root / "ckpt")]
    ref = {"name": "no-retry", "kind": "TrainingRuntime", "apiGroup": "trainer.kubeflow.org"}
    trainer_v2.api.create(TRAINJOB, NS, trainjob("oom", command, runtimeRef=ref))
    trainer_v2.inject("oom", Injected("node-0-0", after="checkpoint_saved", log=OOM))
    assert trainer_v2.train("oom").wait(240) == "Failed"
    (pod,) = trainer_v2.pods("oom")
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (137, "OOMKilled")
    log = pod_log(trainer_v2.api, pod["metadata"]["name"])
    assert log.endswith(OOM)
    assert [e["step"] for e in events(log) if e["event"] == "checkpoint_saved"] == [2]
    snapshot = trainer_v2.api.get("v1/configmaps", NS, "oom-runtime-snapshot")
    assert snapshot["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"


# the validating webhook ------------------------------------------------------------------------

WEBHOOK = 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: '


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"runtimeRef": {"name": "nowhere"}},
         'spec.runtimeRef: Invalid value: v1alpha1.RuntimeRef{Name:"nowhere", '
         "APIGroup:(*string)(0xc000010020), Kind:(*string)(0xc000010030)}: "
         'clustertrainingruntimes.trainer.kubeflow.org "nowhere" not found: specified '
         "clusterTrainingRuntime must be created before the TrainJob is created"),
        ({"runtimeRef": {"name": "torch-distributed", "kind": "Runtime"}},
         "unsupported runtime: Runtime.trainer.kubeflow.org"),
        ({"trainer": {"env": [{"name": "PET_NODE_RANK", "value": "3"},
                              {"name": "A", "value": "b"}]}},
         'spec.trainer.env: Invalid value: []v1.EnvVar{v1.EnvVar{Name:"PET_NODE_RANK", '
         'Value:"3", ValueFrom:(*v1.EnvVarSource)(nil)}, v1.EnvVar{Name:"A", Value:"b", '
         "ValueFrom:(*v1.EnvVarSource)(nil)}}: must not have reserved envs, invalid envs "
         "configured: [PET_NODE_RANK]"),
        ({"runtimePatches": [{"manager": "fsdp-eks.dev/quarantine", "trainingRuntimeSpec": {
            "template": {"spec": {"replicatedJobs": [{"name": "launcher"}]}}}}]},
         "spec.runtimePatches: Invalid value: []v1alpha1.RuntimePatch{...}: must not have "
         "replicated job that doesn't exist in the runtime job template"),
    ],
    ids=["a missing runtime", "an unknown kind", "a reserved env", "a patch of no job"],
)  # fmt: skip
def test_the_webhook_refuses_what_upstream_refuses_and_nothing_is_stored(
    trainer_v2, change, message
):
    body = trainjob("refused", ["torchrun"])
    body["spec"].update(change)
    with pytest.raises(ApiException) as refused:
        trainer_v2.api.create(TRAINJOB, NS, body)
    assert refused.value.status == 403
    assert json.loads(refused.value.body or "{}")["message"] == WEBHOOK + message
    assert trainer_v2.trainjob("refused") is None


def test_runtime_patches_change_only_while_suspended_and_reach_the_pods(trainer_v2):
    api = trainer_v2.api
    api.create(TRAINJOB, NS, trainjob("patched", ["torchrun"], nodes=2))
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/hostname",
                                "operator": "NotIn",
                                "values": ["bad-node"],
                            }
                        ]
                    }
                ]
            }
        }
    }
    patch = {"manager": "fsdp-eks.dev/quarantine", "trainingRuntimeSpec": {"template": {"spec": {
        "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "affinity": affinity}}}}}]}}}}  # fmt: skip
    with pytest.raises(ApiException) as refused:
        api.patch(TRAINJOB, NS, "patched", {"spec": {"runtimePatches": [patch]}})
    assert json.loads(refused.value.body or "{}")["message"] == WEBHOOK + (
        "spec.runtimePatches: Forbidden: RuntimePatches can only be modified when the "
        "TrainJob is suspended before or after the update"
    )
    api.patch(TRAINJOB, NS, "patched", {"spec": {"suspend": True, "runtimePatches": [patch]}})
    assert trainer_v2.run("patched", outcome="Running") == []  # suspended: no pods
    api.patch(TRAINJOB, NS, "patched", {"spec": {"suspend": False}})
    trainer_v2.run("patched", outcome="Running")
    pods = trainer_v2.pods("patched")
    assert len(pods) == 2 and all(p["spec"]["affinity"] == affinity for p in pods)
    container = pods[0]["spec"]["containers"][0]
    assert container["command"] == ["torchrun"] and container["image"].startswith("pytorch/")


def test_pods_no_node_fits_stay_pending_with_a_failed_scheduling_event(trainer_v2):
    trainer_v2.add_nodes("g5.xlarge", 2, gpus=1)
    job = trainjob("big", ["torchrun"], nodes=2)
    job["spec"]["trainer"]["resourcesPerNode"] = {"limits": {"nvidia.com/gpu": "4"}}
    trainer_v2.api.create(TRAINJOB, NS, job)
    trainer_v2.train("big")
    pods = until(lambda: len(trainer_v2.pods("big")) == 2 and trainer_v2.pods("big"))
    reasons = until(lambda: {e["involvedObject"]["name"]: e["message"]
                             for e in trainer_v2.api.list("v1/events", NS)
                             if e["reason"] == "FailedScheduling"})  # fmt: skip
    assert "insufficient nvidia.com/gpu" in reasons[pods[0]["metadata"]["name"]]
    assert [p["status"]["phase"] for p in trainer_v2.pods("big")] == ["Pending", "Pending"]
    assert not trainer_v2.cluster.kubelet.running


def test_past_its_active_deadline_a_trainjob_fails_and_its_pods_go(trainer_v2):
    trainer_v2.add_nodes("g5.12xlarge", 1, gpus=4)
    sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
    trainer_v2.api.create(TRAINJOB, NS, trainjob("late", sleep, activeDeadlineSeconds=2))
    assert trainer_v2.train("late").wait(60) == "Failed"
    (failed,) = [c for c in trainer_v2.trainjob("late")["status"]["conditions"]
                 if c["type"] == "Failed"]  # fmt: skip
    assert (failed["reason"], failed["message"]) == (
        "DeadlineExceeded", "TrainJob exceeded its active deadline")  # fmt: skip
    until(lambda: not trainer_v2.api.list(POD, NS) and not trainer_v2.cluster.kubelet.running)
    assert trainer_v2.api.get(JOBSET, NS, "late") is None


def test_the_pods_of_a_trainjob_not_played_stay_pending_and_start_plays_them(trainer_v2):
    trainer_v2.add_nodes("g5.12xlarge", 2, gpus=4)
    sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
    for name in ("played", "waiting"):
        trainer_v2.api.create(TRAINJOB, NS, trainjob(name, sleep))
    trainer_v2.train("played")

    def phases(name: str) -> list[str]:
        return [p["status"].get("phase", "") for p in trainer_v2.pods(name)]

    until(lambda: phases("played") == ["Running"] and phases("waiting") == ["Pending"])
    assert list(trainer_v2.cluster.kubelet.running) == [
        trainer_v2.pods("played")[0]["metadata"]["name"]
    ]
    trainer_v2.start()
    until(lambda: phases("waiting") == ["Running"])
