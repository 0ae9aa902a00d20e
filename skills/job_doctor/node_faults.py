"""Whose fault a GPU error is, as data: NVIDIA's XIDs (the driver's error numbers), and
the forms node agents report them in. The signature table (failure_signatures.py) builds
its node rows from these; a test per row (tests/unit/test_node_faults.py).

Where an XID shows up:

* the kernel log, as the driver writes it (and a pod's log, where the container shares
  it): ``NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the
  bus.`` (older drivers: ``NVRM: Xid (0000:01:00): 31, ...``);
* the Amazon EKS node monitoring agent: node condition ``AcceleratedHardwareReady=False``
  with reason ``NvidiaXID<n>Error`` (the XIDs it counts as fatal) and the message
  ``detected XID-<n> on the instance, ...``, or an event with reason
  ``NvidiaXID<n>Warning`` for the others; also ``NvidiaDoubleBitError``,
  ``NvidiaNVLinkError``, ``NvidiaDeviceCountMismatch``, ``NvidiaFabricError`` and
  ``DCGMDiagnosticFailure`` (DCGM's findings), and ``EFAErrorMetric`` under
  ``NetworkingReady`` (aws/eks-node-monitoring-agent, pkg/reasons/reasons.yaml);
* NVIDIA NVSentinel (syslog and GPU health monitors): node conditions
  ``SysLogsXIDError`` / ``SysLogsGPUFallenOff`` set True, their message naming
  ``ErrorCode:<n>``;
* the NVIDIA DCGM exporter's counters, read through the API server
  (skills/kube/dcgm.py): ``DCGM_FI_DEV_XID_ERRORS 79 on GPU 1 of node ...`` (the last
  XID of that GPU), and ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`` / ``DCGM_FI_DEV_ROW_REMAP_FAILURE``
  above zero (uncorrectable memory errors, a failed row remap).

Hardware XIDs are the node's fault: the same job runs on another node. Application
XIDs (13, 31, 43) are the job's: an illegal memory access or instruction in a kernel
fails the same way on any node, so it must not cost a node.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Fault = Literal["node", "job"]


@dataclass(frozen=True)
class Xid:
    number: int
    meaning: str
    fault: Fault


# NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors), the ones a training job meets.
XIDS: tuple[Xid, ...] = (
    Xid(13, "graphics engine exception (an illegal instruction or address in a kernel)", "job"),
    Xid(31, "GPU memory page fault (a kernel touched memory it does not own)", "job"),
    Xid(43, "GPU stopped processing (the application's channel was reset after its fault)", "job"),
    Xid(45, "preemptive cleanup after the process ended or an earlier error", "job"),
    Xid(48, "double-bit ECC error (uncorrectable GPU memory error)", "node"),
    Xid(62, "internal micro-controller halt", "node"),
    Xid(63, "ECC page retirement or row remapping recorded (the GPU needs a reset)", "node"),
    Xid(64, "ECC page retirement or row remapping failed", "node"),
    Xid(74, "NVLink error", "node"),
    Xid(79, "GPU has fallen off the bus", "node"),
    Xid(92, "high single-bit ECC error rate", "node"),
    Xid(94, "contained ECC error (the row needs remapping: the GPU needs a reset)", "node"),
    Xid(95, "uncontained ECC error (every process on the GPU is affected)", "node"),
    Xid(119, "GSP RPC timeout (the GPU's system processor stopped answering)", "node"),
    Xid(120, "GSP error", "node"),
    Xid(140, "unrecovered ECC error", "node"),
)
BY_NUMBER = {x.number: x for x in XIDS}

# The number in each form an XID is reported in (see the module's docstring).
XID_FORMS = (
    r"\bXid \([^)]*\):\s*({n})\b",  # the driver's kernel log line
    r"\bNvidiaXID({n})(?:Error|Warning)\b",  # EKS node monitoring agent reasons
    r"\bXID-({n})\b",  # ... and its messages
    r"\bErrorCode:\s*({n})\b",  # NVSentinel's condition messages
    r"\bDCGM_FI_DEV_XID_ERRORS ({n})\b",  # the DCGM exporter's, as skills/kube/dcgm.py says it
)
XID_NUMBER = re.compile("|".join(form.format(n=r"\d+") for form in XID_FORMS))

# Node-agent reasons and kernel messages that are a GPU hardware fault whatever the XID.
HARDWARE_FORMS = (
    r"GPU has fallen off the bus",
    r"uncorrectable ECC error encountered",  # CUDA's cudaErrorECCUncorrectable
    r"\bNvidiaXID\d+Error\b",  # the agent's fatal XIDs (those not in XIDS too)
    r"\bNvidiaDoubleBitError\b",
    r"\bNvidiaNVLinkError\b",
    r"\bNvidiaDeviceCountMismatch\b",
    r"\bNvidiaFabricError\b",
    r"\bDCGMDiagnosticFailure\b",
    r"\bSysLogsGPUFallenOff\b",
    r"\bDCGM_FI_DEV_(?:ECC_DBE_VOL_TOTAL|ROW_REMAP_FAILURE) [1-9]",  # skills/kube/dcgm.py
)
# What aws-ofi-nccl and libfabric's EFA provider say when the network device fails, and
# the node agent's EFA metric.
EFA_FORMS = (
    r"NET/OFI Request \S+ completed with error",
    r"NET/OFI .*\bfi_\w+ failed",
    r"libfabric:\d+:\d+:efa:.*\b(error|failed)\b",
    r"\bEFAErrorMetric\b",
)
XID_KEYWORDS = ("Xid", "XID")
HARDWARE_KEYWORDS = ("fallen off the bus", "uncorrectable ECC")
EFA_KEYWORDS = ("NET/OFI", "libfabric", "EFAErrorMetric")

# Node conditions: "<x>Ready" types (the EKS agent's) are healthy when True; other types
# (node problem detector, NVSentinel) report a problem when True.
HEALTHY_WHEN_TRUE_SUFFIX = "Ready"
# The kubelet's own Ready condition is judged elsewhere (NodeNotReady: preempted).
KUBELET_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")


def xid_pattern(fault: Fault) -> str:
    """Every form of every XID of `fault`, as one pattern."""
    numbers = "|".join(str(x.number) for x in XIDS if x.fault == fault)
    return "|".join(form.format(n=numbers) for form in XID_FORMS)


def hardware_pattern() -> str:
    return "|".join((xid_pattern("node"), *HARDWARE_FORMS))


def efa_pattern() -> str:
    return "|".join(EFA_FORMS)


def xid_of(lines: Iterable[str]) -> Xid | None:
    """The first XID of the table named in `lines` (evidence), or None."""
    for line in lines:
        for found in XID_NUMBER.finditer(line):
            number = int(next(g for g in found.groups() if g))
            if number in BY_NUMBER:
                return BY_NUMBER[number]
    return None


def is_problem(condition_type: str, status: str) -> bool:
    """Whether a node condition reports trouble (see KUBELET_CONDITIONS)."""
    if not condition_type or condition_type in KUBELET_CONDITIONS:
        return False
    if condition_type.endswith(HEALTHY_WHEN_TRUE_SUFFIX):
        return status in ("False", "Unknown")
    return status == "True"


__all__ = [
    "BY_NUMBER",
    "XIDS",
    "Fault",
    "Xid",
    "efa_pattern",
    "hardware_pattern",
    "is_problem",
    "xid_of",
    "xid_pattern",
]
