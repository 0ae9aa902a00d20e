"""Which rank holds the others back: the lost-time clock and the slowest-rank fields
(trainer/rank_times.py). The 2-rank run with a paused rank is in
tests/integration/test_long_runs.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.trainer.conftest import trainer_env
from trainer.rank_times import PROBE_TOLERANCE, TICK_S, gpu_lag, gpu_probe, host_name, lost, slowest


@pytest.mark.parametrize(
    ("gap_s", "expected"),
    [
        (TICK_S, 0.0),  # on time
        (2 * TICK_S, 0.0),  # a tick late: scheduler jitter
        (0.31, 0.30),  # stopped for 300 ms
    ],
)
def test_lost_time_is_what_a_wake_overslept_beyond_a_tick(gap_s, expected):
    assert lost(gap_s, TICK_S) == pytest.approx(expected)


def test_slowest_names_the_rank_its_host_and_its_lag_behind_the_others():
    fields = slowest([0.01, 0.02, 0.35, 0.0], ["a", "a", "b", "c"])
    assert fields == {"slowest_rank": 2, "slowest_host": "b", "rank_lag_s": pytest.approx(0.34)}
    # Two ranks: the lag is against the other one, not the median of both (halved).
    assert slowest([0.3, 0.0], ["x", "y"])["rank_lag_s"] == pytest.approx(0.3)


@pytest.mark.parametrize(
    ("probes_s", "step_s", "expected"),
    [
        # One GPU 30% slower than the median (thermal throttling): charged 0.3 of a 2 s step.
        ([0.010, 0.010, 0.013, 0.010], 2.0, [0.0, 0.0, 0.6, 0.0]),
        # Within the tolerance: the same speed, no one charged.
        ([0.010, 0.0104, 0.0098, 0.010], 2.0, [0.0, 0.0, 0.0, 0.0]),
        # CPU ranks (no probe): nothing to compare.
        ([0.0, 0.0], 1.0, [0.0, 0.0]),
        # Two ranks: the slower is charged against the median of both.
        ([0.010, 0.020], 1.0, [0.0, pytest.approx(0.020 / 0.015 - 1.0)]),
    ],
)
def test_a_slower_gpu_is_charged_its_extra_compute_per_step(probes_s, step_s, expected):
    assert gpu_lag(probes_s, step_s) == pytest.approx(expected)


def test_a_slow_gpu_is_named_with_its_host_through_the_same_fields():
    # The stall clock saw nothing (the process ran); the probe found rank 1 1.5x slower.
    stalled = [0.0, 0.0, 0.0]
    charged = [s + g for s, g in zip(stalled, gpu_lag([0.01, 0.015, 0.01], 1.0), strict=True)]
    assert slowest(charged, ["n0", "n1", "n2"]) == {
        "slowest_rank": 1,
        "slowest_host": "n1",
        "rank_lag_s": pytest.approx(0.5),
    }
    assert PROBE_TOLERANCE < 0.25  # a straggler (a quarter of the step) is never tolerated


def test_the_probe_runs_only_on_a_cuda_device():
    # No GPU here: a CPU rank's probe is 0.0 (no matmul, no timing); the CUDA path times
    # PROBE_REPEATS matmuls between two CUDA events.
    assert gpu_probe(torch.device("cpu")) == 0.0


def test_the_host_is_the_node_the_scheduler_names_else_the_host_name():
    assert host_name({"NODE_NAME": "ip-10-0-0-7", "SLURMD_NODENAME": "n1"}) == "ip-10-0-0-7"
    assert host_name({"SLURMD_NODENAME": "n1"}) == "n1"
    assert host_name({}) == os.uname().nodename


CLOCK = """
import sys, time
from trainer.rank_times import StallClock
clock = StallClock().start()
print("ready", flush=True)
sys.stdin.readline()
print(round(clock.stalled_s, 3), flush=True)
"""


def test_a_stopped_process_counts_the_time_it_was_stopped():
    # A real process, really stopped: the clock thread cannot run either.
    proc = subprocess.Popen(
        [sys.executable, "-c", CLOCK],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=trainer_env(),
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        os.kill(proc.pid, signal.SIGSTOP)
        time.sleep(0.5)
        os.kill(proc.pid, signal.SIGCONT)
        time.sleep(0.1)
        proc.stdin.write("\n")
        proc.stdin.flush()
        stalled = float(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait()
    # At least the stop (minus one tick); the machine's load may add a little.
    assert 0.5 - 2 * TICK_S <= stalled < 1.5
