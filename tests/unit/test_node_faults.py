"""Node evidence in the pod doctor: a test per XID of the table (in each form it is
reported in: the driver's kernel line, the EKS node monitoring agent's reason and
message, NVSentinel's condition message) decides the node's fault or the job's; node
conditions that report trouble; and a job whose node lost a GPU diagnosed with that node
named first and the other ranks' timeouts listed under it."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from skills.job_doctor.diagnose import Signal, _match, diagnose
from skills.job_doctor.failure_signatures import CODES
from skills.job_doctor.node_faults import XIDS, is_problem, xid_of

FIXTURES = Path(__file__).parents[1] / "fixtures" / "pod_doctor"
CODE = {"node": "gpu_hardware_fault", "job": "gpu_application_fault"}


def load(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def forms(number: int) -> list[Signal]:
    """The XID as a pod's log line, the agent's condition/event text and NVSentinel's."""
    kernel = (f"[Thu Nov 20 12:05:00 2026] NVRM: Xid (PCI:0000:a8:00): {number}, pid=2211, "
              "name=python, Ch 00000008")  # fmt: skip
    older = f"NVRM: Xid (0000:01:00): {number}, Ch 0000000b, engmask 00000120"
    agent = f"detected XID-{number} on the instance, review kernel logs for additional information."
    return [
        Signal("p", "log", "", kernel, "log"),
        Signal("p", "log", "", older, "log"),
        *(
            Signal(
                "p",
                "event",
                f"NvidiaXID{number}{severity}",
                f"NvidiaXID{number}{severity}: {agent}",
                "node",
            )
            for severity in ("Error", "Warning")
        ),
        Signal("p", "event", "SysLogsXIDError", f"ErrorCode:{number} PCI:0000:a8:00 GPU-1", "n"),
    ]


@pytest.mark.parametrize("xid", XIDS, ids=[f"xid{x.number}-{x.fault}" for x in XIDS])
def test_each_xid_is_the_node_or_the_job_in_every_form(xid):
    for signal in forms(xid.number):
        row = _match(signal)
        assert row is not None and row.code == CODE[xid.fault], signal.text
        assert CODES[row.code].fault == xid.fault
        assert CODES[row.code].quarantine == (xid.fault == "node")
        assert xid_of([signal.text]) == xid


def test_only_hardware_faults_quarantine_and_application_faults_are_permanent():
    assert CODES["gpu_hardware_fault"].retryable and CODES["gpu_hardware_fault"].quarantine
    assert not CODES["gpu_application_fault"].retryable
    assert not CODES["gpu_application_fault"].quarantine and not CODES["efa_error"].quarantine


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("NvidiaXID154Error: detected XID-154 on the instance", "gpu_hardware_fault"),  # agent
        ("NvidiaDoubleBitError: detected NVIDIA double-bit ECC error", "gpu_hardware_fault"),
        ("NvidiaNVLinkError: detected NVIDIA NVLink error", "gpu_hardware_fault"),
        ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "gpu_hardware_fault"),
        ("EFAErrorMetric: EFA driver metrics show an interface with degradation", "efa_error"),
        ("libfabric:2211:1700000000:efa:cq:efa_rdm_cq_readerr():404<warn> error 12", "efa_error"),
    ],
)
def test_node_agent_reasons_and_device_messages(text, code):
    source = "log" if "libfabric" in text or "CUDA error" in text else "event"
    row = _match(Signal("p", source, "", text, "x"))
    assert row is not None and row.code == code


@pytest.mark.parametrize(
    ("kind", "status", "problem"),
    [
        ("AcceleratedHardwareReady", "False", True),  # the EKS agent: healthy when True
        ("AcceleratedHardwareReady", "True", False),
        ("NetworkingReady", "Unknown", True),
        ("SysLogsXIDError", "True", True),  # NVSentinel / node problem detector: True = trouble
        ("SysLogsXIDError", "False", False),
        ("Ready", "False", False),  # the kubelet's: NodeNotReady is a preemption, elsewhere
        ("MemoryPressure", "True", False),
    ],
)
def test_which_node_conditions_report_trouble(kind, status, problem):
    assert is_problem(kind, status) is problem


def test_the_failed_gpus_node_is_named_first_and_the_timeouts_follow_from_it():
    diagnosis = diagnose(load("gpu_hardware_fault"))
    root = diagnosis.root
    assert (root.code, root.pod, root.rank) == ("gpu_hardware_fault", "xid79-worker-1", 2)
    assert (root.node, root.fault) == ("ip-10-0-1-12.ec2.internal", "node")
    assert root.root_cause.startswith("XID 79, GPU has fallen off the bus")
    assert any("NvidiaXID79Error" in e for e in root.evidence)
    assert any("Xid (PCI:0000:a8:00): 79" in e for e in root.evidence)
    # The other ranks' watchdog timeouts are its consequences, not findings of their own.
    assert diagnosis.codes == ["gpu_hardware_fault"]
    assert sorted(root.consequences) == [
        "collective_timeout on xid79-master-0 (node rank 0)",
        "collective_timeout on xid79-worker-0 (node rank 1)",
        "collective_timeout on xid79-worker-2 (node rank 3)",
    ]
    assert "[node ip-10-0-1-12.ec2.internal: the node's fault]" in diagnosis.summary
    assert "3 consequence(s)" in diagnosis.summary


def test_a_node_condition_alone_names_the_node_even_when_seen_after_the_timeouts():
    snap = load("gpu_hardware_fault")
    snap["events"] = []
    snap["logs"] = {k: v for k, v in snap["logs"].items() if "worker-1" not in k}
    for node in snap["nodes"]:
        for condition in node["status"]["conditions"]:
            if condition["reason"] == "NvidiaXID79Error":
                condition["lastTransitionTime"] = "2026-11-20T13:00:00Z"  # after every timeout
    root = diagnose(snap).root
    assert (root.code, root.node, root.pod) == (
        "gpu_hardware_fault", "ip-10-0-1-12.ec2.internal", "xid79-worker-1")  # fmt: skip
    assert any(e.startswith("node ip-10-0-1-12.ec2.internal condition") for e in root.evidence)


def test_a_healthy_node_adds_nothing_and_an_application_xid_is_the_jobs():
    snap = load("gpu_hardware_fault")
    healthy = copy.deepcopy(snap)
    healthy["events"], healthy["nodes"] = [], [n for n in snap["nodes"] if "12" not in
                                               n["metadata"]["name"]]  # fmt: skip
    healthy["logs"] = {k: v for k, v in snap["logs"].items() if "worker-1" not in k}
    assert "gpu_hardware_fault" not in diagnose(healthy).codes  # the exit 1 is all that is left
    assert diagnose(healthy).root.fault is None
    root = diagnose(load("gpu_application_fault")).root
    assert (root.code, root.fault, root.retryable) == ("gpu_application_fault", "job", False)
    assert root.root_cause.startswith("XID 13, graphics engine exception")
    assert not root.consequences  # only a node's fault explains the other ranks away
