"""The failure signature table: a sample per row, in the real message formats, matched by
exactly that row (the first matching row wins, so each sample also proves no earlier row
steals it)."""

from __future__ import annotations

import pytest

from skills.job_doctor.diagnose import Signal, _match
from skills.job_doctor.failure_signatures import CODES, SIGNATURES, WATCHED, check_table

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:v3"
PULL = f'Failed to pull image "{IMAGE}": rpc error: code = NotFound desc = failed to pull and '
PULL += f'unpack image "{IMAGE}": '


def event(reason: str, message: str = "") -> Signal:
    return Signal("p", "event", reason, message, f"event {reason}")


def container(reason: str, message: str = "", exit_code: int | None = None) -> Signal:
    return Signal("p", "container", reason, message, "container", exit_code=exit_code)


def log(line: str) -> Signal:
    return Signal("p", "log", "", line, "log")


# One sample per row of SIGNATURES, in table order.
SAMPLES: list[tuple[str, Signal]] = [
    ("insufficient_gpu", event("FailedScheduling", "0/4 nodes are available: 4 Insufficient "
     "nvidia.com/gpu. preemption: 0/4 nodes are available: 4 No preemption victims found for "
     "incoming pod.")),
    ("insufficient_efa", event("Unschedulable", "0/2 nodes are available: 2 Insufficient "
     "vpc.amazonaws.com/efa.")),
    ("image_platform_mismatch", container("ErrImagePull", PULL + "no match for platform in "
     "manifest: not found")),
    ("node_disk_full", event("Failed", PULL + "failed to extract layer sha256:9c8f: write "
     "/var/lib/containerd/x/libcudnn.so.9: no space left on device: unknown")),
    ("image_pull_auth", container("ErrImagePull", PULL + f'failed to resolve reference "{IMAGE}"'
     ": unexpected status from HEAD request to https://123456789012.dkr.ecr.us-east-1."
     "amazonaws.com/v2/trainer/manifests/v3: 403 Forbidden")),
    ("image_not_found", event("Failed", PULL + f'failed to resolve reference "{IMAGE}": {IMAGE}: '
     "not found")),
    ("missing_secret", container("CreateContainerConfigError", 'secret "hf-token" not found')),
    ("cuda_driver_too_old", container("StartError", "failed to create containerd task: failed to "
     "create shim task: OCI runtime create failed: runc create failed: unable to start container "
     "process: error during container init: error running hook #0: error running hook: exit "
     "status 1, stdout: , stderr: Auto-detected mode as 'legacy'\nnvidia-container-cli: "
     "requirement error: unsatisfied condition: cuda>=13.0, please update your driver to a "
     "newer version, or use an earlier cuda container: unknown", 128)),
    ("command_not_found", container("StartError", "failed to create containerd task: failed to "
     "create shim task: OCI runtime create failed: runc create failed: unable to start container "
     "process: exec: \"torchrun\": executable file not found in $PATH: unknown", 128)),
    ("command_not_found", container("Error", "", 127)),
    ("host_oom", container("OOMKilled", "", 137)),
    ("segfault", container("Error", "", 139)),
    ("evicted_disk", event("Evicted", "Pod ephemeral local storage usage exceeds the total limit "
     "of containers 20Gi. ")),
    ("host_oom", event("Evicted", "The node was low on resource: memory. Threshold quantity: "
     "100Mi, available: 91220Ki. Container pytorch was using 1843200Ki, request is 0.")),
    ("preempted", event("PreemptionByScheduler", "Kubernetes Scheduler: preempting to "
     "accommodate a higher priority pod")),
    ("preempted", container("Error", "", 143)),
    ("gpu_application_fault", log("[Thu Nov 20 12:15:06 2026] NVRM: Xid (PCI:0000:cb:00): 13, "
     "pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on (GPC 7, TPC 1, SM 0): "
     "Out Of Range Address")),
    ("gpu_hardware_fault", event("NvidiaXID79Error", "NvidiaXID79Error: detected XID-79 on the "
     "instance, review kernel logs for additional information.")),
    ("efa_error", log("ip-10-0-1-10:57:120 [3] NCCL WARN NET/OFI Request 0x7f1c2c0a8f00 "
     "completed with error. RC: 21. Error: 12 (Cannot allocate memory). Completed length: 0")),
    ("cuda_driver_too_old", log("RuntimeError: CUDA driver version is insufficient for CUDA "
     "runtime version")),
    ("cuda_arch_unsupported", log("RuntimeError: CUDA error: no kernel image is available for "
     "execution on the device")),
    ("cuda_oom", log("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU "
     "0 has a total capacity of 79.15 GiB of which 1.23 GiB is free.")),
    ("shm_too_small", log("ERROR: Unexpected bus error encountered in worker. This might be "
     "caused by insufficient shared memory (shm).")),
    ("nccl_connect", log("ip-10-0-1-10:57:120 [0] misc/socket.cc:484 NCCL WARN socketStartConnect"
     ": Connect to 10.0.7.23<47833> failed : Connection refused")),
    ("nccl_connect", log("[rank3]: ncclRemoteError: A call failed possibly due to a network error "
     "or a remote process exiting prematurely.")),
    ("collective_timeout", log("[rank0]:[E1120 12:15:06.215887 52 ProcessGroupNCCL.cpp:616] [Rank "
     "0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5001, OpType=ALLREDUCE, "
     "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600031 milliseconds before timing out.")),
    ("rendezvous_closed", log("torch.distributed.elastic.rendezvous.api.RendezvousClosedError")),
    ("rendezvous_timeout", log("torch.distributed.elastic.rendezvous.api.RendezvousConnectionError"
     ": The connection to the C10d store has failed. See inner exception for details.")),
    ("efa_not_used", log("ip-10-0-1-10:57:57 [0] NCCL INFO NET/OFI No eligible providers were "
     "found")),
    ("gated_model_auth", log("OSError: You are trying to access a gated repo. Make sure to have "
     "access to it at https://huggingface.co/meta-llama/Llama-3.1-8B.")),
    ("nan_loss", log('{"event": "error", "error_type": "NonFiniteLossError", "message": '
     '"non-finite loss nan / grad_norm nan at step 13; lower --learning_rate", "retryable": '
     'true}')),
    ("segfault", log("Fatal Python error: Segmentation fault")),
    ("host_oom", log("  traceback : Signal 9 (SIGKILL) received by PID 1234")),
    ("shm_too_small", log("RuntimeError: DataLoader worker (pid 4321) is killed by signal: Bus "
     "error. It is possible that dataloader's workers are out of shared memory.")),
    ("python_error", log('{"event": "error", "error_type": "ValueError", "message": "bad value",'
     ' "retryable": true}')),
    ("python_error", log("[rank2]: KeyError: 'input_ids'")),
    ("python_error", container("Error", "", 1)),
]  # fmt: skip


def test_every_row_has_a_sample_and_every_code_a_row():
    check_table()
    assert [code for code, _ in SAMPLES] == [row.code for row in SIGNATURES]
    assert {row.code for row in SIGNATURES} | set(WATCHED) == set(CODES)
    # Their cases: tests/unit/test_watchdog.py.
    assert WATCHED == ("straggler", "throughput_degraded", "gpus_idle", "gpu_throttled", "job_hung")


@pytest.mark.parametrize(
    ("index", "sample"),
    list(enumerate(SAMPLES)),
    ids=[f"{i:02d}-{code}" for i, (code, _) in enumerate(SAMPLES)],
)
def test_row_matches_its_sample_first(index, sample):
    _, signal = sample
    assert _match(signal) is SIGNATURES[index]


@pytest.mark.parametrize(
    "signal",
    [
        log("step 12 loss 2.31"),
        log("NCCL INFO Using network AWS Libfabric"),
        log("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "),
        event("Pulled", f'Successfully pulled image "{IMAGE}" in 41.2s'),
        event("Scheduled", "Successfully assigned training/j-worker-0 to ip-10-0-1-10"),
        container("Completed", "", 0),
        container("ImagePullBackOff", f'Back-off pulling image "{IMAGE}"'),
    ],
)
def test_ordinary_lines_match_no_row(signal):
    assert _match(signal) is None


def test_permanent_codes_are_not_retryable():
    for code in ("image_pull_auth", "missing_secret", "gated_model_auth", "segfault"):
        assert not CODES[code].retryable
    assert not CODES["python_error"].retryable
    for code in ("cuda_oom", "preempted", "shm_too_small", "nccl_connect", "image_not_found"):
        assert CODES[code].retryable
