"""The NCCL all-reduce gate: parse `all_reduce_perf` output (nccl-tests' exact format,
or the same table printed by the in-cluster test here), and judge the bus bandwidth
against what the instance type should reach, flagging NCCL's fallback to sockets.

Expected bus bandwidth (GB/s, large messages) is a reference value per instance
(multi-node: about 80 % of the network line rate; one node: the GPUs' NVLink/PCIe
all-reduce), so the verdict says "as expected", "degraded" or "broken", not a benchmark.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from skills.catalog.instances import InstanceSpec
from skills.eks_cluster_manager.models import NcclReport, NcclRow, Transport

PASS_FRACTION = 0.7  # of expected: pass at or above
DEGRADED_FRACTION = 0.4  # below this: fail
NETWORK_EFFICIENCY = 0.8  # busbw reached of the line rate across nodes with EFA
SOCKET_GBPS = 3.0  # what TCP sockets give at best between two nodes

# One node: all-reduce busbw at large sizes, by GPU (NVLink for the SXM parts, PCIe else).
INTRA_NODE_BUSBW: dict[str, float] = {
    "H100": 450.0,
    "H200": 450.0,
    "B200": 700.0,
    "A100": 230.0,
    "A10G": 12.0,
    "L4": 12.0,
    "L40S": 20.0,
    "RTX PRO 6000": 30.0,
    "V100": 130.0,
    "T4": 8.0,
}

_ROW = re.compile(
    r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)"  # size count type redop root
    r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+|N/A)"  # out-of-place time algbw busbw #wrong
    r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+|N/A)\s*$"  # in-place
)
_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s.*?\bon\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([\d.]+)")
_EFA = re.compile(r"NET/OFI|Using network (AWS )?Libfabric|Selected [Pp]rovider is efa")
_SOCKET = re.compile(r"Using network Socket|NET/Socket|Initialized NET plugin Socket")
_NO_OFI = re.compile(r"NET/OFI No eligible providers|Failed to initialize any NET plugin")


def network_gbps(spec: InstanceSpec) -> float:
    """'3200 Gb' -> 3200, '4x100 Gb' -> 400, '<=25 Gb' -> 25."""
    text = spec.network.replace("<=", "")
    if m := re.match(r"(\d+)x(\d+)", text):
        return float(m[1]) * float(m[2])
    number = re.match(r"[\d.]+", text)
    assert number is not None, text  # every network in the table starts with its Gbps
    return float(number[0])


def expected_busbw(spec: InstanceSpec | None, nodes: int, gpu_name: str | None) -> float | None:
    if spec is not None and nodes > 1:
        return round(network_gbps(spec) / 8 * NETWORK_EFFICIENCY, 1)
    gpu = spec.gpu if spec is not None else _gpu_from_device(gpu_name)
    return INTRA_NODE_BUSBW.get(gpu) if gpu else None


def _gpu_from_device(device: str | None) -> str | None:
    if not device:
        return None
    for name in sorted(INTRA_NODE_BUSBW, key=len, reverse=True):
        if name.replace(" ", "").lower() in device.replace(" ", "").lower():
            return name
    return None


@dataclass
class _Output:
    """What all_reduce_perf printed: result rows, ranks and hosts, the device, the average."""

    rows: list[NcclRow] = field(default_factory=list)
    hosts: set[str] = field(default_factory=set)
    ranks: set[int] = field(default_factory=set)
    device: str | None = None
    avg: float | None = None


def _read(text: str) -> _Output:
    out = _Output()
    for line in text.splitlines():
        if m := _ROW.match(line):
            wrong = sum(int(w) for w in (m[9], m[13]) if w != "N/A")
            out.rows.append(
                NcclRow(
                    size_bytes=int(m[1]),
                    algbw_gbps=max(float(m[7]), float(m[11])),
                    busbw_gbps=max(float(m[8]), float(m[12])),
                    wrong=wrong,
                )
            )
        elif m := _RANK.match(line):
            out.ranks.add(int(m[1]))
            out.hosts.add(m[2])
            out.device = out.device or m[3]
        elif m := _AVG.match(line):
            out.avg = float(m[1])
    return out


def _transport(text: str, multi: bool, has_rows: bool) -> tuple[Transport, bool, bool]:
    """(transport, used EFA, used sockets) as NCCL's own log lines say."""
    uses_efa = bool(_EFA.search(text)) and not _NO_OFI.search(text)
    uses_socket = bool(_SOCKET.search(text)) or bool(_NO_OFI.search(text))
    if uses_efa:
        return "efa", uses_efa, uses_socket
    if uses_socket:
        return "socket", uses_efa, uses_socket
    return ("nvlink" if not multi and has_rows else "unknown"), uses_efa, uses_socket


def parse(text: str, spec: InstanceSpec | None = None) -> NcclReport:
    out = _read(text)
    nodes = len(out.hosts) or None
    multi = (nodes or 1) > 1
    transport, uses_efa, uses_socket = _transport(text, multi, bool(out.rows))
    report = NcclReport(
        verdict="incomplete",
        reason="",
        nodes=nodes,
        gpus=len(out.ranks) or None,
        gpu_name=spec.gpu if spec else _gpu_from_device(out.device),
        instance_type=spec.name if spec else None,
        transport=transport,
        rows=out.rows,
        avg_busbw_gbps=out.avg,
    )
    if not out.rows:
        report.reason = "no result rows: the test did not get to its first size (see its log)"
        return report
    _judge(report, out, spec, uses_efa, uses_socket)
    return report


def _judge(
    report: NcclReport, out: _Output, spec: InstanceSpec | None, uses_efa: bool, uses_socket: bool
) -> None:
    """The verdict and its reason: wrong results, sockets where EFA should be, a cut-short
    run, then the peak bus bandwidth against what the hardware should reach."""
    rows, nodes, transport = out.rows, report.nodes, report.transport
    multi = (nodes or 1) > 1
    peak = max(rows, key=lambda r: r.busbw_gbps)
    report.peak_busbw_gbps = peak.busbw_gbps
    report.largest_size_bytes = rows[-1].size_bytes
    expected = expected_busbw(spec, nodes or 1, out.device)
    report.expected_busbw_gbps = expected
    if any(r.wrong for r in rows):
        bad = [r.size_bytes for r in rows if r.wrong]
        report.verdict, report.reason = "fail", f"wrong results at sizes {bad}: data corruption"
        return
    if multi and spec is not None and spec.efa and not uses_efa:
        report.verdict = "fail"
        report.reason = (
            f"NCCL used sockets, not EFA, across {nodes} nodes (peak {peak.busbw_gbps:g} GB/s)"
        )
        report.warnings.append(
            "request vpc.amazonaws.com/efa in the pods; FI_PROVIDER=efa, "
            "FI_EFA_USE_DEVICE_RDMA=1 where EFA has RDMA read (p4d/p5/p6); an image with "
            "aws-ofi-nccl (DLC)"
        )
        return
    if out.avg is None:
        report.reason = (
            f"output ends before the summary (last size {rows[-1].size_bytes} B, "
            f"peak so far {peak.busbw_gbps:g} GB/s): the run was cut short"
        )
        return
    if multi and uses_socket and not uses_efa:
        report.warnings.append("NCCL used sockets across nodes")
    if expected is None:
        report.verdict = "pass"
        report.reason = f"peak {peak.busbw_gbps:g} GB/s; no reference for this hardware"
        return
    ratio = peak.busbw_gbps / expected
    report.verdict = (
        "pass" if ratio >= PASS_FRACTION else "degraded" if ratio >= DEGRADED_FRACTION else "fail"
    )
    report.reason = (
        f"peak busbw {peak.busbw_gbps:g} GB/s = {ratio:.0%} of the "
        f"{expected:g} GB/s expected ({transport}, {nodes or 1} node(s))"
    )
