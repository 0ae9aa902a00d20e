"""Auto-retry end to end on kmock, tests/services/training_operator.py playing the
Training Operator for each attempt: a CUDA OOM on rank 1 is fixed (half the batch,
double the accumulation) and the resubmitted job resumes from the checkpoint and
succeeds; a permanent finding stops at once; the crash-loop breaker stops a repeat; a
target without the pod doctor refuses; the loop runs as an operation for agents; a
canary token in a failing pod's log never reaches the result."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import pytest

from commands.deploy_training_job import deploy_training_job
from commands.get_operation import get_operation
from skills.job_orchestration import auto_retry
from skills.operations import operations
from skills.shared.errors import ToolFailure
from skills.shared.progress import CollectingProgress
from skills.training_job_deployer.targets.kubernetes import target as kubernetes_target
from tests.services.training_operator import (
    RUN_LOG,
    Attempt,
    TrainingOperator,
    current_job,
    play_attempts,
)

pytestmark = pytest.mark.integration

# Labels unreadable (and the ECR images these tests record in moto have no data plane):
# the CUDA gate would refuse them (cuda_unverified), so these retry tests skip it.
IMAGE = "localhost:9/fsdp:v1"
CANARY = "hf_" + "AutoRetryCanary" * 3
MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
LINES = [json.loads(line) for line in RUN_LOG.splitlines()]

# Rank 0 until the other rank died: steps, a checkpoint at step 3, then the watchdog.
RANK0_TIMED_OUT = (
    "".join(json.dumps(e) + "\n" for e in LINES[:3])
    + f"downloading with token={CANARY}\n"
    + "[rank0]:[E1123 13:50:01.123456 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, "
    "NumelOut=1, Timeout(ms)=600000) ran for 600015 milliseconds before timing out.\n"
)
# Rank 1 (worker-0): torch's own message.
RANK1_OOM = (
    f"[rank1]: HF_TOKEN={CANARY}\n"
    "[rank1]: Traceback (most recent call last):\n"
    '[rank1]:   File "/app/trainer/train.py", line 212, in train_step\n'
    "[rank1]:     loss.backward()\n"
    "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 "
    "has a total capacity of 79.11 GiB of which 1.02 GiB is free. Including non-PyTorch memory, "
    "this process has 78.08 GiB memory in use. Of the allocated memory 75.50 GiB is allocated "
    "by PyTorch, and 1.21 GiB is reserved by PyTorch but unallocated. If reserved but "
    "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
    "to avoid fragmentation.\n"
)
SHM = (
    "llama-worker-0:52:97 [1] include/shm.h:28 NCCL WARN Error while creating shared memory "
    "segment /dev/shm/nccl-Ot1uqZ (size 9637888)\n"
)
GATED = (
    f"HF_TOKEN={CANARY} python -m trainer --model_name_or_path meta-llama/Llama-3.1-8B\n"
    "huggingface_hub.errors.GatedRepoError: 403 Client Error. (Request ID: Root=1-6740)\n"
    "Cannot access gated repo for url https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/"
    "main/config.json.\nAccess to model meta-llama/Llama-3.1-8B is restricted. You must have "
    "access to it and be authenticated to access it. Please log in.\n"
)


def resumed_log(step: int) -> str:
    """Rank 0 of the resubmitted job: the trainer loaded the step's checkpoint and went on."""
    start = {**LINES[0], "resumed_from": step, "train_batch_size": 4, "grad_accum_steps": 4}
    loaded = {"event": "checkpoint_loaded", "step": step,
              "path": f"/checkpoints/llama/step-{step}", "seconds": 0.2}  # fmt: skip
    summary = {**LINES[-1], "resumed_from": step}
    events = [start, loaded, *LINES[3:-1], summary]
    return "".join(json.dumps(e) + "\n" for e in events)


@pytest.fixture
def operator(kube_api, tmp_path, monkeypatch) -> TrainingOperator:
    kube_api.reset()
    monkeypatch.setenv(operations.STATE_DIR_ENV, str(tmp_path / "state"))
    # The stand-in answers within 50 ms, not a cluster's seconds: poll it at the local
    # target's cadence, with the same two polls per follow chunk as 2 s / 4 s. What
    # each attempt's state and remedy are does not depend on how often it is looked at;
    # at 2 s the tests spent three quarters of their time asleep. (An operation's loop
    # runs in a process of its own and keeps the real cadence.)
    monkeypatch.setattr(kubernetes_target.KubernetesTarget, "poll_s", 0.25)
    monkeypatch.setattr(auto_retry, "FOLLOW_CHUNK_S", 0.5)
    return TrainingOperator(kube_api)


def play(operator: TrainingOperator, attempts: list[Attempt]) -> Callable[[], list[dict]]:
    """The operator over the attempts (tests/services/training_operator.py play_attempts):
    join() gives each attempt's job as created."""
    join = play_attempts(operator, attempts)
    return lambda: join()[0]


def cannot_pull(operator: TrainingOperator, message: str) -> None:
    """The job's pods as the kubelet leaves them when the pull fails: waiting in
    ErrImagePull, with its Failed event; the job itself stays Running."""
    for pod in operator.create_pods("llama"):
        status = {"phase": "Pending", "containerStatuses": [
            {"name": "pytorch", "ready": False, "restartCount": 0, "image": "", "imageID": "",
             "started": False, "state": {"waiting": {"reason": "ErrImagePull",
                                                     "message": message}}}]}  # fmt: skip
        operator.core.patch_namespaced_pod_status(
            pod, operator.namespace, {"status": status}, _preload_content=False
        )
        operator.add_event(pod, "Failed", message)


def deploy(**kwargs):
    args = {"job_name": "llama", "num_nodes": 2, "gpu_per_node": 8, "image_uri": IMAGE,
            "instance_type": "p5.48xlarge", "max_steps": 6, "train_batch_size": 8,
            "grad_accum_steps": 2, "auto_retry": True, "skip_gate": True}  # fmt: skip
    args.update(kwargs)
    return deploy_training_job(**args)


def trainer_args(job: dict) -> list[str]:
    master = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    return [*master.get("command", []), *master.get("args", [])]


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def created(kube_api) -> int:
    """PyTorchJobs created so far (POSTs to the collection)."""
    paths = [(r.method, str(r.url.path)) for r in kube_api.emulator._requests]
    return sum(m == "POST" and p.endswith("/pytorchjobs") for m, p in paths)


OOM_THEN_RESUME = [
    {"outcome": "Failed", "exit_codes": {"master-0": 1, "worker-0": 1},
     "rank_logs": {"master-0": RANK0_TIMED_OUT, "worker-0": RANK1_OOM}},
    {"outcome": "Succeeded", "rank_logs": {"master-0": resumed_log(3)}},
]  # fmt: skip


def check_oom_then_resume(result, jobs: list[dict]) -> None:
    assert result.status == "succeeded" and result.stop_reason is None
    first, second = result.attempts
    assert (first.number, first.status, first.code) == (1, "failed", "cuda_oom")
    assert (first.pod, first.rank, first.retryable) == ("llama-worker-0", 1, True)
    assert any("CUDA out of memory. Tried to allocate 2.00 GiB" in e for e in first.evidence)
    assert first.remedy.startswith("cuda_oom/halve_batch")
    assert first.spec_diff == ["train_batch_size: 8 -> 4", "grad_accum_steps: 2 -> 4"]
    assert first.checkpoint_step == 3
    assert (second.number, second.status, second.code) == (2, "succeeded", None)
    assert second.resumed_from == 3 and result.resumed_from == 3 and result.steps == 6
    # Attempt 2 was submitted with the remedy, in the same checkpoint location.
    assert len(jobs) == 2
    before, after = trainer_args(jobs[0]), trainer_args(jobs[1])
    assert (flag(before, "--train_batch_size"), flag(before, "--grad_accum_steps")) == ("8", "2")
    assert (flag(after, "--train_batch_size"), flag(after, "--grad_accum_steps")) == ("4", "4")
    assert flag(after, "--checkpoint_dir") == flag(before, "--checkpoint_dir")
    assert CANARY not in result.model_dump_json()


def test_an_oom_is_fixed_and_the_resubmitted_job_resumes_and_succeeds(operator, kube_api):
    operator.add_nodes("p5.48xlarge", 2, efa=32)
    join = play(operator, OOM_THEN_RESUME)
    progress = CollectingProgress()
    result = deploy(progress=progress)
    check_oom_then_resume(result, join())
    assert created(kube_api) == 2
    said = [e.message for e in progress.events]
    assert any("attempt 1: cuda_oom on llama-worker-0 (node rank 1)" in m for m in said)
    assert any("attempt 1: cuda_oom/halve_batch" in m for m in said)
    assert all(CANARY not in m for m in said)


def test_a_permanent_finding_stops_at_once_with_its_fix(operator, kube_api):
    operator.add_nodes("p5.48xlarge", 2)
    join = play(operator, [{"outcome": "Failed", "rank_logs": {"master-0": GATED}}])
    result = deploy(max_retries=3)
    join()
    assert result.status == "failed" and created(kube_api) == 1
    (only,) = result.attempts
    assert (only.code, only.rank, only.retryable, only.remedy) == ("gated_model_auth", 0, False,
                                                                   None)  # fmt: skip
    assert "gated_model_auth is permanent" in result.stop_reason
    assert only.fix and only.fix in result.stop_reason  # the fix, said once more
    assert result.message.startswith("auto-retry stopped")
    assert "HF_TOKEN=" in result.log_tail and CANARY not in result.model_dump_json()


def test_events_of_the_replaced_job_do_not_count_against_the_new_one(operator, kube_api):
    """Attempt 1 is preempted (an event says so); attempt 2 reuses the pod names and hits
    an OOM: the preemption event, older than attempt 2's job, is not its cause."""
    operator.add_nodes("p5.48xlarge", 2)
    preempted = json.dumps({"event": "preempted", "step": 3, "signal": 15,
                            "checkpoint": "/checkpoints/llama/step-3"})  # fmt: skip
    first_log = "".join(json.dumps(e) + "\n" for e in LINES[:3]) + preempted + "\n"

    def preempt() -> None:
        job = operator.job("llama")
        time.sleep(1.1)  # the next job is created in a later second than this one
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "llama-master-0.preempted", "namespace": operator.namespace},
            "involvedObject": {"kind": "Pod", "name": "llama-master-0",
                               "namespace": operator.namespace},
            "reason": "Preempted", "type": "Warning", "count": 1,
            "message": "Preempted in order to admit critical pod",
            "lastTimestamp": job["metadata"]["creationTimestamp"],
        }  # fmt: skip
        operator.core.create_namespaced_event(operator.namespace, event, _preload_content=False)
        operator.run("llama", outcome="Failed", exit_codes={"master-0": 143},
                     rank_logs={"master-0": first_log})  # fmt: skip

    join = play(operator, [preempt, *OOM_THEN_RESUME])
    result = deploy()
    join()
    assert [a.code for a in result.attempts] == ["preempted", "cuda_oom", None]
    assert result.attempts[0].remedy.startswith("preempted/resubmit")
    assert result.status == "succeeded" and created(kube_api) == 3


def test_an_image_tag_that_is_not_there_is_replaced_by_the_newest_in_ecr(
    operator, kube_api, moto_server
):
    import boto3

    ecr = boto3.client("ecr", region_name="us-east-1")
    ecr.create_repository(repositoryName="fsdp-retry")
    config = {"digest": "sha256:" + "2" * 64, "size": 1,
              "mediaType": "application/vnd.docker.container.image.v1+json"}  # fmt: skip
    manifest = json.dumps({"schemaVersion": 2, "config": config, "layers": [],
                           "mediaType": MANIFEST_V2})  # fmt: skip
    ecr.put_image(repositoryName="fsdp-retry", imageManifest=manifest, imageTag="v2")
    repo = "123456789012.dkr.ecr.us-east-1.amazonaws.com/fsdp-retry"
    missing = f"{repo}:v9"
    operator.add_nodes("p5.48xlarge", 2)
    not_found = (
        f'Failed to pull image "{missing}": rpc error: code = NotFound desc = failed to pull '
        f'and unpack image "{missing}": failed to resolve reference "{missing}": {missing}: '
        "not found"
    )
    join = play(operator, [lambda: cannot_pull(operator, not_found), {"outcome": "Succeeded"}])
    result = deploy(image_uri=missing, skip_gate=True)
    jobs = join()
    assert [a.code for a in result.attempts] == ["image_not_found", None]
    assert result.attempts[0].spec_diff == [f"image_uri: {missing} -> {repo}:v2"]
    image = jobs[1]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    assert image[0]["image"] == f"{repo}:v2" and result.status == "succeeded"


def test_an_image_the_driver_cannot_run_stops_with_the_build_image_call(operator, kube_api):
    operator.add_nodes("p5.48xlarge", 2)
    too_old = (
        "RuntimeError: The NVIDIA driver on your system is too old (found version 12020). "
        "Please update your GPU driver by downloading and installing a new version from the "
        "URL: http://www.nvidia.com/Download/index.aspx Alternatively, go to: "
        "https://pytorch.org to install a PyTorch version that has been compiled with your "
        "version of the CUDA driver.\n"
    )
    join = play(operator, [{"outcome": "Failed", "rank_logs": {"master-0": too_old}}])
    result = deploy()
    join()
    assert created(kube_api) == 1
    (only,) = result.attempts
    assert (only.code, only.remedy, only.spec_diff) == ("cuda_driver_too_old", None, [])
    assert "build-image " in result.stop_reason
    assert "--instance_type p5.48xlarge" in result.stop_reason


def test_max_retries_zero_diagnoses_and_stops_with_the_remedy_it_would_apply(operator, kube_api):
    operator.add_nodes("p5.48xlarge", 2)
    join = play(operator, OOM_THEN_RESUME[:1])
    result = deploy(max_retries=0)
    join()
    assert created(kube_api) == 1 and [a.code for a in result.attempts] == ["cuda_oom"]
    assert result.stop_reason == "max_retries (0) used up; the next remedy: cuda_oom/halve_batch"


def test_the_breaker_stops_the_same_failure_after_its_remedy(operator, kube_api):
    operator.add_nodes("p5.48xlarge", 2)
    failed = {"outcome": "Failed", "exit_codes": {"master-0": 1, "worker-0": 1},
              "rank_logs": {"master-0": RANK0_TIMED_OUT, "worker-0": SHM}}  # fmt: skip
    join = play(operator, [failed, failed])
    result = deploy(max_retries=3)
    jobs = join()
    assert created(kube_api) == 2 and len(result.attempts) == 2
    first, second = result.attempts
    assert (first.code, first.rank) == ("shm_too_small", 1)
    assert first.remedy.startswith("shm_too_small/larger_shm")
    # 8 GiB for each of 8 processes + 1 GiB for the small model's staged async-save copy
    assert first.spec_diff == ["/dev/shm: 65 GiB -> 130 GiB (emptyDir, medium Memory)"]
    shm = [
        v["emptyDir"]["sizeLimit"]
        for v in jobs[1]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["volumes"]
        if v["name"] == "shm"
    ]
    assert shm == ["130Gi"]  # the remedy reached the manifest
    assert second.code == "shm_too_small" and second.remedy is None
    assert result.stop_reason.startswith("crash loop: shm_too_small again after")


def test_the_loop_runs_as_an_operation_for_agents(operator, kube_api):
    operator.add_nodes("p5.48xlarge", 2, efa=32)
    join = play(operator, OOM_THEN_RESUME)
    started = deploy(wait_seconds=0)  # an agent's call: returns at once
    assert started.status == "running" and started.operation_id
    assert started.next_step.tool == "get_operation"
    assert started.next_step.arguments == {"operation_id": started.operation_id, "wait_seconds": 30}
    state = get_operation(operation_id=started.operation_id, wait_seconds=60)
    jobs = join()
    assert state.status == "succeeded", state.error
    from commands.deploy_training_job import DeployResult

    check_oom_then_resume(DeployResult.model_validate(state.result), jobs)
    assert CANARY not in state.model_dump_json()


def test_max_retries_is_bounded_and_auto_retry_strict():
    for bad in ({"max_retries": 99}, {"max_retries": -1}, {"auto_retry": "yes"}):
        with pytest.raises(ToolFailure) as caught:
            deploy(**bad)
        assert caught.value.code == "invalid_input"


def test_pods_that_cannot_pull_their_image_end_the_attempt_without_a_job_failure(
    operator, kube_api
):
    """The job stays Running while its pods wait in ErrImagePull: the pod doctor names
    the cause (permanent: registry credentials), so the loop stops instead of waiting."""
    operator.add_nodes("p5.48xlarge", 2)
    denied = (
        f'Failed to pull image "{IMAGE}": rpc error: code = Unknown desc = failed to pull and '
        f'unpack image "{IMAGE}": failed to resolve reference "{IMAGE}": pull access denied, '
        "repository does not exist or may require authorization: server message: "
        "insufficient_scope: authorization failed"
    )

    def stuck() -> None:
        while current_job(operator) is None:
            time.sleep(0.05)
        cannot_pull(operator, denied)

    thread = threading.Thread(target=stuck, daemon=True)
    thread.start()
    result = deploy(max_retries=2)
    thread.join(5)
    assert created(kube_api) == 1
    (only,) = result.attempts
    assert (only.status, only.code, only.retryable) == ("failed", "image_pull_auth", False)
    assert "image_pull_auth is permanent" in result.stop_reason
    assert result.status == "failed" and "auto-retry stopped" in result.message
    assert operator.job("llama")["spec"]["runPolicy"]["suspend"] is True  # not left waiting
