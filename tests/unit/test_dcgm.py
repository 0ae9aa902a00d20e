"""The DCGM exporter's counters as node evidence: a recorded /metrics answer parsed by
prometheus_client's parser (tests/fixtures/dcgm/recorded.py says where it is from and
what is changed in it), and the pod doctor's use of the lines (offline snapshots)."""

from __future__ import annotations

import pytest

from skills.job_doctor.diagnose import diagnose
from skills.kube import dcgm
from tests.fixtures.dcgm.recorded import RECORDED, RECORDED_HOST, with_values
from tests.fixtures.pod_doctor import snapshots as builder

NODE = "ip-10-0-1-12.ec2.internal"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(RECORDED, [], id="the recorded healthy GPU has no trouble"),
        pytest.param(
            with_values(DCGM_FI_DEV_XID_ERRORS=79),
            [dcgm.Reading("DCGM_FI_DEV_XID_ERRORS", "0", RECORDED_HOST, 79)],
            id="the last XID of a GPU is read with its gpu and Hostname labels",
        ),
        pytest.param(
            with_values(DCGM_FI_DEV_ROW_REMAP_FAILURE=1),
            [dcgm.Reading("DCGM_FI_DEV_ROW_REMAP_FAILURE", "0", RECORDED_HOST, 1)],
            id="a failed row remap is read",
        ),
        pytest.param(
            with_values(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=2),
            [dcgm.Reading("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "0", RECORDED_HOST, 2)],
            id="uncorrectable ECC errors are read",
        ),
        pytest.param(
            with_values(DCGM_FI_DEV_CLOCKS_EVENT_REASONS=0x48),
            [dcgm.Reading("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "0", RECORDED_HOST, 0x48)],
            id="a throttle mask with slowdown bits is read",
        ),
        pytest.param(
            with_values(DCGM_FI_DEV_CLOCKS_EVENT_REASONS=0x4),
            [],
            id="a power cap alone (not a slowdown) is no trouble",
        ),
    ],
)
def test_the_recorded_exporter_answer_is_read_for_trouble(text, expected):
    assert dcgm.readings(text) == expected


@pytest.mark.parametrize(
    ("reading", "line"),
    [
        pytest.param(
            dcgm.Reading("DCGM_FI_DEV_XID_ERRORS", "3", NODE, 79),
            f"DCGM_FI_DEV_XID_ERRORS 79 on GPU 3 of node {NODE} (dcgm-exporter)",
            id="an XID line names the GPU and the node",
        ),
        pytest.param(
            dcgm.Reading("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "0", "other", 0x48),
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS 0x48 on GPU 0 of node n (Hostname other): "
            "hardware slowdown, hardware thermal slowdown (dcgm-exporter)",
            id="a throttle line names the slowdowns and a Hostname that is not the node",
        ),
    ],
)
def test_each_reading_is_one_evidence_line(reading, line):
    assert reading.line(NODE if NODE in line else "n") == line


def test_text_that_is_not_prometheus_is_a_value_error():
    with pytest.raises(ValueError):
        dcgm.readings("<html>503 Service Unavailable</html>\n{")


def _job_on_nodes(gpu_metrics: dict[str, list[str]]) -> dict:
    """Two ranks on two nodes that both timed out in NCCL; nothing in their logs, events
    or node conditions names a GPU: the exporter's lines are the only node evidence."""
    pods = [
        builder.pod("xid", "master", 0, node="ip-10-0-1-11.ec2.internal",
                    phase="Failed", state=builder.terminated(1)),
        builder.pod("xid", "worker", 0, node=NODE, phase="Failed",
                    state=builder.terminated(1)),
    ]  # fmt: skip
    logs = {p["metadata"]["name"]: builder.watchdog(i) for i, p in enumerate(pods)}
    snapshot = builder.snapshot(builder.job("xid", 1), pods, [], logs)
    return {**snapshot, "gpu_metrics": gpu_metrics}


def _lines(text: str) -> list[str]:
    return [r.line(NODE) for r in dcgm.readings(text)]


@pytest.mark.parametrize(
    ("text", "root"),
    [
        pytest.param(with_values(DCGM_FI_DEV_XID_ERRORS=79), "gpu_hardware_fault",
                     id="an XID 79 from the exporter names the node"),
        pytest.param(with_values(DCGM_FI_DEV_ROW_REMAP_FAILURE=1), "gpu_hardware_fault",
                     id="a failed row remap from the exporter names the node"),
        pytest.param(with_values(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL=2), "gpu_hardware_fault",
                     id="uncorrectable ECC errors from the exporter name the node"),
        pytest.param(with_values(DCGM_FI_DEV_XID_ERRORS=31), None,
                     id="an application XID 31 from the exporter is not blamed on the node"),
        pytest.param(with_values(DCGM_FI_DEV_XID_ERRORS=43), None,
                     id="an application XID 43 from the exporter is not blamed on the node"),
        pytest.param(with_values(DCGM_FI_DEV_CLOCKS_EVENT_REASONS=0x40), None,
                     id="a throttled GPU is evidence, not a failure of the node"),
    ],
)  # fmt: skip
def test_the_doctor_takes_the_exporters_node_evidence(text, root):
    diagnosis = diagnose(_job_on_nodes({NODE: _lines(text)}))
    node_findings = [f for f in diagnosis.findings if f.fault == "node"]
    if root is None:
        assert not node_findings and "gpu_" not in " ".join(diagnosis.codes)
        return
    first = diagnosis.findings[0]
    assert (first.code, first.node, first.fault) == (root, NODE, "node")
    assert any("dcgm-exporter" in e for e in first.evidence)
