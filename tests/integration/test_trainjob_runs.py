"""Issue 47's done-when, on the Kubeflow Trainer v2.3.0 / JobSet v0.12.0 stand-in
(tests/services/trainer_v2.py) whose pods really run what the TrainJob renders: deploy
with engine auto trains the demo job as a 2-pod TrainJob to succeeded and
get_training_job shows its steps and loss from the trainerStatus rank 0 posted (a list
reads no log); a cancelled TrainJob and a failed one are
reported as such; auto-retry resumes an OOM-killed TrainJob from its checkpoint. (Only
v1 served and neither served: test_trainjob_target.py, test_kubernetes_target.py.)"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from commands.cancel_training_job import cancel_training_job
from commands.deploy_training_job import deploy_training_job
from commands.diagnose_training_job import diagnose_training_job
from commands.get_training_job import get_training_job
from commands.get_training_job_logs import get_training_job_logs
from skills.training_job_deployer.targets.kubernetes.settings import KubernetesSettings
from skills.training_job_deployer.targets.kubernetes.target import KubernetesTarget
from tests.services.trainer_status import TrainerStatusServer
from tests.services.trainer_v2 import Injected, TrainerV2, serve_engines

pytestmark = pytest.mark.integration

IMAGE = "localhost:9/fsdp:v1"
K8S: dict[str, Any] = {"target": "kubernetes"}
CLAIM = "fsx-claim"
CUDA_OOM = (
    "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 "
    "has a total capacity of 79.10 GiB of which 1.02 GiB is free.\n"
)


@pytest.fixture
def cluster(kube_api, tmp_path):
    """Trainer v2 alone served, its controllers played with the TrainJobStatus feature on
    (the status server stand-in: rank 0's trainer posts its progress there)."""
    kube_api.reset()
    serve_engines(kube_api, v1=False, v2=True)
    with TrainerStatusServer(on_status=lambda *_: None) as server:
        trainer = TrainerV2(kube_api, root=tmp_path / "cluster", status_server=server)
        trainer.add_nodes("g5.12xlarge", 2, gpus=4, efa=1)
        trainer.add_claim(CLAIM)
        try:
            yield trainer
        finally:
            trainer.stop()


def deploy(**kwargs):
    args = {"job_name": "tiny", "num_nodes": 2, "gpu_per_node": 1, "image_uri": IMAGE,
            "instance_type": "g5.12xlarge", "max_steps": 4, "checkpoint_freq": 2,
            "checkpoint_volume": f"pvc:{CLAIM}", "skip_gate": True, "wait_seconds": 0,
            **K8S}  # fmt: skip
    args.update(kwargs)
    return deploy_training_job(**args)


def events(log: str) -> list[dict]:
    return [json.loads(line) for line in log.splitlines() if line.startswith('{"event"')]


def test_engine_auto_trains_the_demo_job_as_a_2_pod_trainjob_to_succeeded(cluster):
    planned = deploy(dry_run=True)
    assert planned.plan.engine == "trainjob" and planned.plan.manifest["kind"] == "TrainJob"
    assert deploy().engine == "trainjob"
    assert cluster.train("tiny").wait(240) == "Complete", cluster.errors
    # Rank 0's trainer posted its progress; get reads it there, not in a log.
    posted = cluster.trainjob("tiny")["status"]["trainerStatus"]
    metrics = {m["name"]: m["value"] for m in posted["metrics"]}
    assert posted["progressPercentage"] == 100 and metrics["step"] == "4"
    state = get_training_job(job_name="tiny", **K8S, wait_seconds=0)
    assert (state.status, state.engine, state.steps, state.max_steps) == (
        "succeeded", "trainjob", 4, 4)  # fmt: skip
    assert state.last_loss == float(metrics["loss"]) and len(state.pods or {}) == 2
    # The list reads the same from the object, and no log.
    target = KubernetesTarget(KubernetesSettings())
    (listed,) = target.list_jobs().items
    assert (listed.steps, listed.last_loss) == (4, float(metrics["loss"]))
    assert not [p for p in target.client.paths if p.endswith("/log")], target.client.paths
    log = get_training_job_logs(job_name="tiny", **K8S).text
    start = events(log)[0]
    assert start["event"] == "start" and start["world_size"] == 2


def test_a_cancelled_trainjob_and_a_failed_one_are_reported_as_such(cluster):
    deploy(job_name="stopped", max_steps=10_000, checkpoint_freq=0, num_nodes=1)
    cluster.train("stopped")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if get_training_job(job_name="stopped", **K8S, wait_seconds=0).steps > 0:
            break
        time.sleep(0.5)
    cancelled = cancel_training_job(job_name="stopped", confirm=True, **K8S)
    assert cancelled.status == "cancelled" and cancelled.engine == "trainjob"
    assert cluster.trainjob("stopped")["spec"]["suspend"] is True
    # A dataset no pod has: the real trainer exits non-zero and the TrainJob fails.
    deploy(job_name="broken", dataset="/data/missing.jsonl", num_nodes=1)
    assert cluster.train("broken").wait(240) == "Failed"
    failed = get_training_job(job_name="broken", **K8S, wait_seconds=0)
    assert failed.status == "failed" and failed.engine == "trainjob", failed
    assert failed.next_step is not None and failed.next_step.tool == "diagnose_training_job"
    # The pod doctor reads the JobSet's pod: rank 0 by its completion index, named as such.
    root = diagnose_training_job(job_name="broken", **K8S).root
    assert root is not None and (root.rank, root.replica) == (0, "node-0"), root
    assert (root.pod or "").startswith("broken-node-0-0-")


def test_auto_retry_resumes_an_oom_killed_trainjob_from_its_checkpoint(cluster):
    # Rank 0 dies of a CUDA OOM once its step-2 checkpoint is saved (once: the resubmitted
    # TrainJob of the same name runs clean).
    cluster.inject("tiny", Injected("node-0-0", after="checkpoint_saved", log=CUDA_OOM,
                                    exit_code=1, reason="Error"))  # fmt: skip
    cluster.start()
    result = deploy(auto_retry=True, train_batch_size=4, grad_accum_steps=1, wait_seconds=None)
    assert result.status == "succeeded", result
    first, second = result.attempts or []
    assert (first.status, first.code, first.rank) == ("failed", "cuda_oom", 0)
    assert (first.remedy or "").startswith("cuda_oom/") and first.checkpoint_step == 2
    assert second.resumed_from == 2
    log = get_training_job_logs(job_name="tiny", **K8S).text
    (start,) = [e for e in events(log) if e["event"] == "start"]
    assert start["resumed_from"] == 2


XID79 = (
    "[Thu Nov 20 12:05:00 2026] NVRM: Xid (PCI:0000:a8:00): 79, pid=2211, name=python, GPU "
    "has fallen off the bus.\n[rank0]: RuntimeError: CUDA error: unspecified launch failure\n"
)


def test_a_gpu_fault_quarantines_its_node_and_the_resubmitted_trainjob_keeps_off_it(cluster):
    cluster.add_nodes("g5.12xlarge", 1, gpus=4, efa=1)  # room for 2 pods without the bad one
    cluster.inject("tiny", Injected("node-0-0", after="checkpoint_saved", log=XID79,
                                    exit_code=1, reason="Error"))  # fmt: skip
    cluster.start()
    result = deploy(auto_retry=True, max_retries=2, wait_seconds=None)
    assert result.status == "succeeded", result
    first = (result.attempts or [])[0]
    assert (first.code, first.rank) == ("gpu_hardware_fault", 0) and first.quarantined
    (bad,) = first.quarantined
    # The resubmitted TrainJob keeps off it through the suite's runtimePatches entry, and
    # the scheduler put its pods elsewhere.
    (patch,) = (cluster.trainjob("tiny") or {})["spec"]["runtimePatches"]
    (node,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    term = node["template"]["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]  # fmt: skip
    assert term == {"matchFields": [{"key": "metadata.name", "operator": "NotIn",
                                     "values": [bad]}]}  # fmt: skip
    assert bad not in {p["spec"].get("nodeName") for p in cluster.pods("tiny")}
