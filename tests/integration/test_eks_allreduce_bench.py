"""The in-cluster NCCL test's own program, run for real here (torchrun, 2 processes, gloo
on CPU): its output is all_reduce_perf's table, which the same parser reads."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from skills.eks_cluster_manager.nccl import parse
from skills.eks_cluster_manager.nccl_job import BENCH

pytestmark = pytest.mark.integration


def test_the_bench_prints_what_the_parser_reads(tmp_path):
    pytest.importorskip("torch")
    env = {
        **os.environ,
        "NCCL_TEST_MIN_BYTES": "1024",
        "NCCL_TEST_MAX_BYTES": "65536",
        "NCCL_TEST_FACTOR": "8",
        "NCCL_TEST_ITERS": "3",
        "NCCL_TEST_WARMUP": "1",
        "OMP_NUM_THREADS": "1",
    }
    argv = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--standalone",
        str(BENCH),
    ]
    done = subprocess.run(
        argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = parse(done.stdout)
    assert [r.size_bytes for r in report.rows] == [1024, 8192, 65536]
    assert report.gpus == 2 and report.nodes == 1 and report.avg_busbw_gbps is not None
    assert all(r.wrong == 0 and r.busbw_gbps >= 0 for r in report.rows)
    assert report.verdict == "pass"  # CPU: no reference to judge against, and complete
