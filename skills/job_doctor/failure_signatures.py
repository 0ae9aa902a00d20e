"""How a failing training pod shows its cause, as data: one table of signatures
(CUDA-AND-FAILURES.md section 6, plus the section 5 run-time CUDA messages), read by
the pod doctor (diagnose.py). A test per row (tests/unit/test_failure_signatures.py).

Each row says where to look and what to look for:

* `sources`: "event" (an Event about the pod, a pod condition, the pod's own status
  reason/message: what the scheduler and the kubelet say), "container" (a container's
  waiting/terminated state: reason, message, exit code) or "log" (a line of the pod's
  log, current or previous);
* `reasons`: the event/condition/state reasons it applies to (empty: any);
* `keywords`: literal substrings, one of which a log line must hold before `pattern`
  is tried on it (so a 10 MB log costs a few substring scans, not a regex per line);
* `pattern`: a regular expression on the message or the line (None: reason/exit
  code alone decide);
* `exit_codes`: a terminated container's exit codes it applies to (empty: any);
* `role`: "cause" (a failure in its own right), "symptom" (what the other ranks show
  when one rank failed: timeouts, closed rendezvous, a lost peer; reported first only
  when no cause is found), "fallback" (a generic Python error: reported for a pod only
  when nothing more specific is found there) or "warning" (the job may run, badly).

A signal (one event, one container state, one log line) takes the FIRST row that
matches it, so the more specific rows come first. Root causes, remediations and
whether a retry can help are per code (`CODES`), so every row of a code says the
same thing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from skills.job_doctor import node_faults
from skills.job_doctor.node_faults import Fault
from skills.training_job_deployer import watchdog
from trainer.rules import EXIT_PREEMPTED

Source = Literal["event", "container", "log"]
Role = Literal["cause", "symptom", "fallback", "warning"]


@dataclass(frozen=True)
class Code:
    """What a finding code means: the root cause, the fix, whether a retry can help;
    whose fault it is where that is known (a node's hardware, or the job), and whether
    auto-retry quarantines the node it happened on."""

    root_cause: str
    remediation: str
    retryable: bool
    fault: Fault | None = None
    quarantine: bool = False


@dataclass(frozen=True)
class Signature:
    code: str
    sources: tuple[Source, ...]
    pattern: str | None = None
    reasons: tuple[str, ...] = ()
    keywords: tuple[str, ...] = ()
    exit_codes: tuple[int, ...] = ()
    role: Role = "cause"
    regex: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.pattern is not None:
            object.__setattr__(self, "regex", re.compile(self.pattern, re.IGNORECASE))
        if "log" in self.sources and not self.keywords:
            raise ValueError(f"{self.code}: a log row needs keywords")


CODES: dict[str, Code] = {
    "insufficient_gpu": Code(
        "the pod asks more nvidia.com/gpu than any node has free (node group at its "
        "limit, or no NVIDIA device plugin)",
        "ask at most the node's GPU count per pod (gpu_per_node = nprocPerNode), scale "
        "the node group up, or install the NVIDIA device plugin",
        True,
    ),
    "insufficient_efa": Code(
        "the pod asks more vpc.amazonaws.com/efa than the nodes offer (no EFA device "
        "plugin, or a request above the instance's EFA count)",
        "request the instance type's EFA count, or install the EFA device plugin",
        True,
    ),
    "image_not_found": Code(
        "the image tag (or repository) does not exist in the registry",
        "use a pushed tag (the newest one in ECR), or push the image first",
        True,
    ),
    "image_platform_mismatch": Code(
        "the image has no variant for the node's CPU architecture (amd64 image on arm64 "
        "nodes, or the reverse)",
        "build the image for the node's platform, or pin the pods to nodes of the image's "
        "architecture (node affinity on kubernetes.io/arch)",
        False,
    ),
    "image_pull_auth": Code(
        "the node may not pull from the registry (the node role lacks ECR read access, or "
        "a private registry needs an imagePullSecret)",
        "attach AmazonEC2ContainerRegistryReadOnly to the node group's IAM role (or add "
        "an imagePullSecret), then resubmit",
        False,
    ),
    "node_disk_full": Code(
        "the node's disk is too small to unpack the image",
        "give the node group a larger root volume (or a smaller image), then resubmit",
        False,
    ),
    "missing_secret": Code(
        "the pod references a Secret or ConfigMap (or a key in one) that does not exist",
        "create it (e.g. the HF token Secret) in the job's namespace, or fix the reference",
        False,
    ),
    "command_not_found": Code(
        "the container's command is not in the image (wrong entrypoint or torchrun path)",
        "fix the command: torchrun is /opt/conda/bin/torchrun or /usr/local/bin/torchrun "
        "in the usual images; check with the image's own shell",
        False,
    ),
    "host_oom": Code(
        "the container ran out of host memory (dataloader workers, a full checkpoint "
        "loaded on every rank, CPU offload)",
        "raise the container's memory limit, use fewer dataloader workers, load "
        "checkpoints sharded",
        False,
    ),
    "preempted": Code(
        "the pod was stopped from outside: node preemption, spot interruption, drain or "
        "eviction (SIGTERM, then SIGKILL after the grace period)",
        "resubmit as is; it resumes from the newest complete checkpoint",
        True,
    ),
    "evicted_disk": Code(
        "the kubelet evicted the pod: the node ran low on ephemeral storage (checkpoints "
        "or logs written to the node's local disk)",
        "put checkpoints on a PVC/FSx or s3://, or request ephemeral-storage for the pod",
        False,
    ),
    "segfault": Code(
        "a native library crashed (SIGSEGV): mismatched CUDA/NCCL/extension builds",
        "rebuild the image with aligned libraries (one CUDA major, extensions built for "
        "this torch); a retry crashes again",
        False,
    ),
    "shm_too_small": Code(
        "/dev/shm is too small (64 MB in a container by default) for NCCL and DataLoader workers",
        "mount an emptyDir with medium Memory at /dev/shm (sized for the node); fewer "
        "dataloader workers",
        True,
    ),
    "nccl_connect": Code(
        "NCCL could not reach a peer: it bound a non-routable interface, a security group "
        "blocks node-to-node traffic, or a peer went away",
        "set NCCL_SOCKET_IFNAME=^lo,docker,veth,eni,pod-id-link0; allow all traffic "
        "between the nodes' security group and itself",
        True,
    ),
    "efa_not_used": Code(
        "NCCL fell back to TCP sockets: EFA is not requested, not installed, or the "
        "aws-ofi-nccl plugin is missing from the image",
        "request vpc.amazonaws.com/efa, set FI_PROVIDER=efa (FI_EFA_USE_DEVICE_RDMA=1 on "
        "p4d/p5/p6 only), "
        "and build on an image with EFA (an AWS DLC base)",
        False,
    ),
    "collective_timeout": Code(
        "a collective timed out: a rank hung, straggled or died, and the others waited for it",
        "find the rank that stopped first (its own finding), raise the process-group "
        "timeout for slow steps (checkpoints), check EFA",
        True,
    ),
    "rendezvous_timeout": Code(
        "not every node joined torchrun's rendezvous in time (pods not scheduled, or a "
        "wrong rendezvous endpoint)",
        "gang-schedule the pods (minAvailable), raise the join timeout, check the "
        "master service and port",
        True,
    ),
    "rendezvous_closed": Code(
        "a peer left the rendezvous and torchrun's restarts were exhausted",
        "restart the whole job (it resumes from its checkpoint); raise max_restarts",
        True,
    ),
    "cuda_oom": Code(
        "GPU memory ran out",
        "halve train_batch_size and double grad_accum_steps (same global batch), then "
        "activation checkpointing, then CPU offload, or a GPU with more memory",
        True,
    ),
    "cuda_driver_too_old": Code(
        "the node's NVIDIA driver is older than the image's CUDA runtime needs",
        "rebuild the image on a CUDA the node driver supports (build_image with the node's "
        "driver_version), or move to a newer GPU AMI",
        True,
    ),
    "cuda_arch_unsupported": Code(
        "the image's PyTorch has no kernels for this GPU's architecture",
        "rebuild the image with a CUDA variant that covers the GPU (build_image with the "
        "instance_type)",
        True,
    ),
    "gated_model_auth": Code(
        "the model or tokenizer is gated on the Hugging Face hub and the job has no valid "
        "token for it",
        "accept the model's licence on huggingface.co and put a token with access in the "
        "job's HF token Secret; a retry fails the same way",
        False,
    ),
    "nan_loss": Code(
        "training diverged: the loss or the gradient norm became NaN/inf",
        "lower learning_rate (or add warmup) and resume from a checkpoint before the "
        "divergence; the same settings diverge again",
        False,
    ),
    "gpu_hardware_fault": Code(
        "a GPU of the node failed (a hardware XID: fell off the bus, ECC, NVLink, GSP): the "
        "node's fault, not the job's; the other ranks' timeouts follow from it",
        "run on other nodes: auto_retry cordons and taints the node "
        "(fsdp-eks.io/quarantined) and resumes the job from its checkpoint elsewhere; "
        "manage_eks_cluster action=release_node undoes it once the node is repaired",
        True,
        fault="node",
        quarantine=True,
    ),
    "gpu_application_fault": Code(
        "the GPU reported an application fault (XID 13/31/43: an illegal address or "
        "instruction in a kernel): the job's fault, not the node's",
        "debug the kernel or extension (CUDA_LAUNCH_BLOCKING=1, compute-sanitizer); a retry "
        "fails the same way on any node",
        False,
        fault="job",
    ),
    "efa_error": Code(
        "the node's EFA network device reported errors (a failed completion, a degraded link)",
        "resubmit (it resumes from its checkpoint); if the node shows it again, take it out "
        "of service and check the EFA device plugin and the security group",
        True,
        fault="node",
    ),
    "python_error": Code(
        "the training script raised an exception",
        "read the traceback in the evidence and fix the code or its configuration; a "
        "retry fails the same way",
        False,
    ),
    # A running job's step lines, read by the watchdog (no signature row: it measures).
    **{code: Code(*meaning) for code, meaning in watchdog.CODES.items()},
}
# Codes found by measuring step lines (training_job_deployer/watchdog.py), not by a row.
WATCHED = tuple(watchdog.CODES)

# Reasons a container waiting on its image has (and the kubelet event that says why).
PULL = ("ErrImagePull", "ImagePullBackOff", "Failed")
SCHEDULING = ("FailedScheduling", "Unschedulable")
# Why a container did not start (container state reasons, and the kubelet's Failed event).
START = ("RunContainerError", "StartError", "ContainerCannotRun", "CrashLoopBackOff", "Failed")
# The pod's DisruptionTarget condition reasons, and node events, that mean "stopped from
# outside".
DISRUPTION = (
    "PreemptionByScheduler",
    "PreemptionByKubeScheduler",
    "DeletionByTaintManager",
    "EvictionByEvictionAPI",
    "TerminationByKubelet",
    "DeletionByPodGC",
    "Preempted",
    "Preempting",
    "NodeNotReady",
    "NodeShutdown",
    "Shutdown",
    "Terminated",
    "NodeLost",
    "SpotInterruption",
)

# Order matters: a signal takes the first row that matches it.
SIGNATURES: tuple[Signature, ...] = (
    # --- scheduling -------------------------------------------------------------------
    Signature(
        "insufficient_gpu",
        ("event",),
        r"Insufficient nvidia\.com/gpu",
        reasons=SCHEDULING,
    ),
    Signature(
        "insufficient_efa",
        ("event",),
        r"Insufficient vpc\.amazonaws\.com/efa",
        reasons=SCHEDULING,
    ),
    # --- the image ----------------------------------------------------------------------
    Signature(
        "image_platform_mismatch",
        ("container", "event"),
        r"no match for platform in manifest|image platform .* does not match|exec format error",
        reasons=(*PULL, *START),
    ),
    Signature(
        "node_disk_full",
        ("container", "event"),
        r"no space left on device",
        reasons=PULL,
    ),
    Signature(
        "image_pull_auth",
        ("container", "event"),
        r"\b401 Unauthorized|\b403 Forbidden|no basic auth credentials|authorization failed"
        r"|unauthorized: authentication required|pull access denied|not authorized to "
        r"perform: ecr:",
        reasons=PULL,
    ),
    Signature(
        "image_not_found",
        ("container", "event"),
        r"manifest unknown|name unknown|: not found\b|manifest for \S+ not found"
        r"|repository \S+ not found",
        reasons=PULL,
    ),
    # --- the container's configuration and start ---------------------------------------
    Signature(
        "missing_secret",
        ("container", "event"),
        r"\b(secret|configmap) \"[^\"]+\" not found|couldn't find key \S+ in (Secret|ConfigMap)",
        reasons=("CreateContainerConfigError", "FailedMount", "Failed"),
    ),
    Signature(
        "cuda_driver_too_old",
        ("container", "event"),
        r"nvidia-container-cli: requirement error: unsatisfied condition: cuda>=",
        reasons=START,
    ),
    Signature(
        "command_not_found",
        ("container", "event"),
        r"executable file not found in \$PATH|exec: \"[^\"]+\": stat \S+: no such file",
        reasons=START,
    ),
    Signature("command_not_found", ("container",), exit_codes=(127,)),
    # --- how the container ended --------------------------------------------------------
    Signature("host_oom", ("container",), reasons=("OOMKilled",)),
    Signature("segfault", ("container",), exit_codes=(139,)),
    # --- the kubelet and the node -------------------------------------------------------
    Signature(
        "evicted_disk",
        ("event",),
        r"low on resource: ephemeral-storage|ephemeral local storage usage exceeds"
        r"|exceeded its local ephemeral storage limit",
        reasons=("Evicted",),
    ),
    Signature(
        "host_oom",
        ("event",),
        r"low on resource: memory",
        reasons=("Evicted",),
    ),
    Signature("preempted", ("event",), reasons=DISRUPTION),
    # 143: SIGTERM (the trainer saves a checkpoint and exits EXIT_PREEMPTED, 128 + SIGTERM);
    # 137 without OOMKilled: SIGKILL after the grace period.
    Signature("preempted", ("container",), exit_codes=(137, EXIT_PREEMPTED), role="fallback"),
    # --- the node's GPUs and network: XIDs, ECC, EFA (node_faults.py) --------------------
    # Pod logs, and the node's conditions and events (their text is "<reason>: <message>").
    # The job's XIDs first: an application fault never costs the node.
    Signature(
        "gpu_application_fault",
        ("log", "event"),
        node_faults.xid_pattern("job"),
        keywords=node_faults.XID_KEYWORDS,
    ),
    Signature(
        "gpu_hardware_fault",
        ("log", "event"),
        node_faults.hardware_pattern(),
        keywords=(*node_faults.XID_KEYWORDS, *node_faults.HARDWARE_KEYWORDS),
    ),
    Signature(
        "efa_error",
        ("log", "event"),
        node_faults.efa_pattern(),
        keywords=node_faults.EFA_KEYWORDS,
    ),
    # --- the log: run-time CUDA (section 5) ---------------------------------------------
    Signature(
        "cuda_driver_too_old",
        ("log",),
        r"CUDA driver version is insufficient for CUDA runtime version"
        r"|The NVIDIA driver on your system is too old"
        r"|unsatisfied condition: cuda>=",
        keywords=(
            "driver version is insufficient",
            "driver on your system is too old",
            "unsatisfied condition: cuda",
        ),
    ),
    Signature(
        "cuda_arch_unsupported",
        ("log",),
        r"no kernel image is available for execution on the device"
        r"|is not compatible with the current PyTorch installation",
        keywords=("no kernel image is available", "not compatible with the current PyTorch"),
    ),
    Signature(
        "cuda_oom",
        ("log",),
        r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory",
        keywords=("out of memory", "OutOfMemoryError"),
    ),
    # --- the log: shared memory, NCCL, EFA ----------------------------------------------
    Signature(
        "shm_too_small",
        ("log",),
        r"Error while creating shared memory segment /dev/shm/nccl-"
        r"|insufficient shared memory \(shm\)|failed to extend /dev/shm"
        r"|unable to (write to|allocate shared memory\(shm\) for) file </?torch_",
        keywords=("/dev/shm", "shared memory", "torch_"),
    ),
    Signature(
        "nccl_connect",
        ("log",),
        r"NCCL WARN .*(Connect to \S+ failed|connect.* (refused|timed out)|No route to host)"
        r"|socketPollConnect.*(Connection refused|No route to host|timed out)"
        r"|Bootstrap : no socket interface found|socketStartConnect: Connect to",
        keywords=("Connect", "connect", "Bootstrap"),
    ),
    # A peer that went away: what the survivors see when one rank died.
    Signature(
        "nccl_connect",
        ("log",),
        r"NCCL WARN .*(Connection closed by remote peer|Connection reset by peer"
        r"|peer \S+ closed connection)|ncclRemoteError|remote process exited or there was "
        r"a network error",
        keywords=("NCCL WARN", "ncclRemoteError", "remote process exited"),
        role="symptom",
    ),
    Signature(
        "collective_timeout",
        ("log",),
        r"Watchdog caught collective operation timeout|watchdog got stuck"
        r"|Timed out waiting \d+ms for (send|recv) operation|collective operation timeout",
        keywords=(
            "Watchdog caught",
            "watchdog got stuck",
            "Timed out waiting",
            "collective operation timeout",
        ),
        role="symptom",
    ),
    Signature(
        "rendezvous_closed",
        ("log",),
        r"RendezvousClosedError",
        keywords=("RendezvousClosedError",),
        role="symptom",
    ),
    Signature(
        "rendezvous_timeout",
        ("log",),
        r"RendezvousTimeoutError|RendezvousConnectionError|rendezvous .*timed out",
        keywords=("Rendezvous", "rendezvous"),
        role="symptom",
    ),
    Signature(
        "efa_not_used",
        ("log",),
        r"NET/OFI No eligible providers were found|Initialized NET plugin Socket"
        r"|NCCL INFO Using network Socket",
        keywords=("No eligible providers", "NET plugin Socket", "Using network Socket"),
        role="warning",
    ),
    # --- the log: the model and the optimisation ----------------------------------------
    Signature(
        "gated_model_auth",
        ("log",),
        r"Cannot access gated repo|gated repo|GatedRepoError|Access to model \S+ is restricted"
        r"|401 Client Error.*huggingface\.co|huggingface\.co.*\b401\b"
        r"|Invalid (user token|credentials in Authorization header)",
        keywords=(
            "gated",
            "Gated",
            "is restricted",
            "401",
            "Invalid user token",
            "Invalid credentials",
        ),
    ),
    Signature(
        "nan_loss",
        ("log",),
        r"NonFiniteLossError|non-finite loss|loss is (nan|inf)\b",
        keywords=(
            "NonFiniteLossError",
            "non-finite loss",
            "oss is nan",
            "oss is inf",
            "oss is NaN",
        ),
    ),
    Signature(
        "segfault",
        ("log",),
        r"Segmentation fault|Signal 11 \(SIGSEGV\)|SIGSEGV",
        keywords=("Segmentation fault", "SIGSEGV"),
    ),
    # torchelastic's report of a worker the kernel's OOM killer took (inside the
    # container, so the container itself may not be OOMKilled).
    Signature(
        "host_oom",
        ("log",),
        r"Signal 9 \(SIGKILL\) received by PID|exitcode\s*:\s*-9\b"
        r"|DataLoader worker \(pid \d+\) is killed by signal: Killed",
        keywords=("SIGKILL", "exitcode", "is killed by signal: Killed"),
    ),
    Signature(
        "shm_too_small",
        ("log",),
        r"DataLoader worker \(pid \d+\) is killed by signal: Bus error",
        keywords=("Bus error",),
    ),
    # --- generic Python errors: only when nothing more specific is found in the pod ------
    # The trainer's JSON error line (rank 0 on stdout, other ranks on stderr).
    Signature(
        "python_error",
        ("log",),
        r"\"event\": \"error\"",
        keywords=('"event": "error"',),
        role="fallback",
    ),
    # The last line of a traceback (not torchelastic's wrapper, which names no cause).
    Signature(
        "python_error",
        ("log",),
        r"^\s*(\[rank\d+\]:\s*)?(?!\S*ChildFailedError)([A-Za-z_][\w]*\.)*[A-Za-z_]\w*"
        r"(Error|Exception|Interrupt)(: .*)?$",
        keywords=("Error", "Exception"),
        role="fallback",
    ),
    # Exit code 1 (a Python exception) with nothing said about why.
    Signature("python_error", ("container",), exit_codes=(1,), role="fallback"),
)

SOURCES: tuple[Source, ...] = ("event", "container", "log")


def rows_for(source: Source) -> tuple[Signature, ...]:
    return tuple(row for row in SIGNATURES if source in row.sources)


def codes() -> tuple[str, ...]:
    """Every finding code, in CODES order."""
    return tuple(CODES)


def check_table() -> None:
    """Every row names a known code, and every code but the watchdog's has a row (run by
    the tests)."""
    unknown = {row.code for row in SIGNATURES} - CODES.keys()
    missing = CODES.keys() - {row.code for row in SIGNATURES} - set(WATCHED)
    if unknown or missing:
        raise ValueError(f"unknown codes {sorted(unknown)}, codes without a row {sorted(missing)}")


__all__ = [
    "CODES",
    "SIGNATURES",
    "WATCHED",
    "Code",
    "Role",
    "Signature",
    "Source",
    "codes",
    "rows_for",
]
