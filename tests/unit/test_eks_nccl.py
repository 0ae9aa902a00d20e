"""NCCL all-reduce output in all_reduce_perf's exact format (written here after
nccl-tests' layout), each with its verdict: an EFA run on p5, a socket fallback, a
single-node NVLink run, a truncated run, wrong results; and the expectation table."""

from __future__ import annotations

import pytest

from commands.manage_eks_cluster import manage_eks_cluster
from skills.catalog.instances import INSTANCES, instance_spec
from skills.eks_cluster_manager.nccl import expected_busbw, network_gbps, parse

HEADER = """# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
{ranks}#
#                                                              out-of-place                       in-place          
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       
"""  # noqa: E501, W291
FOOTER = """# Out of bounds values : 0 OK
# Avg bus bandwidth    : {avg}
#
"""


def ranks(hosts: list[str], gpus: int, device: str) -> str:
    lines, rank = [], 0
    for host in hosts:
        for dev in range(gpus):
            lines.append(
                f"#  Rank {rank:2d} Group  0 Pid  {4100 + rank:5d} on {host:>10} device "
                f"{dev:2d} [0x{dev:02x}] {device}\n"
            )
            rank += 1
    return "".join(lines)


def row(size: int, time_us: float, algbw: float, busbw: float, wrong: int = 0) -> str:
    cells = f"{time_us:8.1f} {algbw:7.2f} {busbw:7.2f} {wrong:6d}"
    return f"{size:12d}  {size // 4:12d}     float     sum      -1  {cells}  {cells}\n"


H100 = "NVIDIA H100 80GB HBM3"
EFA_INIT = (
    "p5-a:28:28 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl 1.13.2\n"
    "p5-a:28:28 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 32 nics)\n"  # noqa: E501
    "p5-a:28:28 [0] NCCL INFO Using network Libfabric\n"
)
SOCKET_INIT = (
    "p5-a:28:28 [0] NCCL INFO NET/OFI No eligible providers were found\n"
    "p5-a:28:28 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.1.12<0>\n"
    "p5-a:28:28 [0] NCCL INFO Using network Socket\n"
)


def efa_run_p5() -> str:
    body = row(8, 60.1, 0.00, 0.00) + row(1048576, 95.2, 11.01, 20.65)
    body += row(1073741824, 5300.0, 202.59, 379.86) + row(8589934592, 42100.0, 204.04, 382.57)
    return (
        EFA_INIT
        + HEADER.format(ranks=ranks(["p5-a", "p5-b"], 8, H100))
        + body
        + FOOTER.format(avg=195.77)
    )


def socket_run_p5() -> str:
    body = row(1048576, 2900.0, 0.36, 0.68) + row(1073741824, 690000.0, 1.56, 2.92)
    return (
        SOCKET_INIT
        + HEADER.format(ranks=ranks(["p5-a", "p5-b"], 8, H100))
        + body
        + FOOTER.format(avg=1.80)
    )


def nvlink_run_p4d() -> str:
    device = "NVIDIA A100-SXM4-40GB"
    body = row(1048576, 40.2, 26.08, 45.64) + row(1073741824, 8200.0, 130.94, 229.15)
    return HEADER.format(ranks=ranks(["p4d-a"], 8, device)) + body + FOOTER.format(avg=137.4)


def truncated_run_p5() -> str:
    body = row(8, 60.1, 0.00, 0.00) + row(1048576, 95.2, 11.01, 20.65)
    return EFA_INIT + HEADER.format(ranks=ranks(["p5-a", "p5-b"], 8, H100)) + body + "  21474"


def test_efa_run_on_p5_passes():
    report = parse(efa_run_p5(), instance_spec("p5.48xlarge"))
    assert (report.verdict, report.transport, report.nodes, report.gpus) == ("pass", "efa", 2, 16)
    assert report.peak_busbw_gbps == 382.57 and report.avg_busbw_gbps == 195.77
    assert report.expected_busbw_gbps == 320.0  # 3200 Gb/s / 8 * 0.8
    assert report.largest_size_bytes == 8589934592 and len(report.rows) == 4
    assert "120% of the 320 GB/s expected" in report.reason


def test_socket_fallback_on_an_efa_instance_fails_and_says_why():
    report = parse(socket_run_p5(), instance_spec("p5.48xlarge"))
    assert report.verdict == "fail" and report.transport == "socket"
    assert "sockets, not EFA" in report.reason
    assert any("vpc.amazonaws.com/efa" in w for w in report.warnings)


def test_single_node_nvlink_run_is_judged_against_nvlink():
    report = parse(nvlink_run_p4d(), instance_spec("p4d.24xlarge"))
    assert (report.verdict, report.transport, report.nodes) == ("pass", "nvlink", 1)
    assert report.expected_busbw_gbps == 230.0 and report.peak_busbw_gbps == 229.15
    # Without an instance type the GPU comes from the device names.
    assert parse(nvlink_run_p4d()).gpu_name == "A100"
    assert parse(nvlink_run_p4d()).verdict == "pass"


def test_truncated_run_is_incomplete():
    report = parse(truncated_run_p5(), instance_spec("p5.48xlarge"))
    assert report.verdict == "incomplete"
    assert "cut short" in report.reason and report.largest_size_bytes == 1048576


def test_slow_efa_run_is_degraded_then_failed_and_wrong_results_fail():
    slow = efa_run_p5().replace("382.57", "200.00").replace("379.86", "150.00")
    assert parse(slow, instance_spec("p5.48xlarge")).verdict == "degraded"
    slower = slow.replace("200.00", "90.00").replace("150.00", "80.00")
    assert parse(slower, instance_spec("p5.48xlarge")).verdict == "fail"
    corrupt = nvlink_run_p4d().replace(
        row(1048576, 40.2, 26.08, 45.64), row(1048576, 40.2, 26.08, 45.64, wrong=3)
    )
    report = parse(corrupt, instance_spec("p4d.24xlarge"))
    assert report.verdict == "fail" and "corruption" in report.reason


def test_no_rows_is_incomplete():
    report = parse("NCCL WARN Bootstrap : no socket interface found\n")
    assert report.verdict == "incomplete" and report.rows == []


@pytest.mark.parametrize("spec", INSTANCES, ids=lambda s: s.name)
def test_every_instance_has_an_expectation(spec):
    assert network_gbps(spec) > 0
    assert expected_busbw(spec, 2, None) > 0 and expected_busbw(spec, 1, None) > 0


def test_the_tool_analyzes_a_saved_output(tmp_path):
    saved = tmp_path / "all_reduce_perf.txt"
    saved.write_text(socket_run_p5())
    report = manage_eks_cluster(
        action="nccl_test", nccl_output=str(saved), instance_type="ml.p5.48xlarge"
    )
    assert report.nccl.verdict == "fail" and report.cli_exit_status() == 1
    assert report.summary.startswith("fail: NCCL used sockets")
