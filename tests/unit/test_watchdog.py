"""The watchdog's rules over step lines as the trainer writes them (a case per row: what
makes each finding, and the near misses that must not). The real runs, a rank paused
with SIGSTOP, are in tests/integration/test_long_runs.py."""

from __future__ import annotations

import json

import pytest

from skills.job_doctor.failure_signatures import CODES, WATCHED
from skills.training_job_deployer import watchdog
from skills.training_job_deployer.trainer_log import LogFollower, RunMetrics

T0 = 1_800_000_000.0  # the wall clock at the first step line
START = {
    "event": "start", "world_size": 4, "max_steps": 1000, "log_freq": 2,
    "checkpoint_freq": 50, "collective_timeout_s": 300.0,
    "nccl_flight_recorder": "/runs/j/nccl_traces/rank_<rank>",
}  # fmt: skip


def steps(
    n: int,
    *,
    step_s: float = 0.5,
    lag: float = 0.0,
    rank: int | list[int] = 0,
    rate: float | list[float] = 1000.0,
    first: int = 2,
) -> list[dict]:
    """n step lines every 2 steps from step `first`, as the trainer writes them."""
    out = []
    for i in range(n):
        step = first + 2 * i
        out.append({
            "event": "step", "step": step, "loss": 3.0, "step_s": step_s,
            "tokens_per_s": rate[i] if isinstance(rate, list) else rate,
            "elapsed_s": step * step_s, "time": T0 + step * step_s,
            "slowest_rank": rank[i] if isinstance(rank, list) else rank,
            "slowest_host": "ip-10-0-0-9", "rank_lag_s": lag,
        })  # fmt: skip
    return out


def gpu(lines: list[dict], **fields) -> list[dict]:
    """The step lines with the ranks' GPU fields (trainer/gpu_telemetry.py step_fields)."""
    return [{**line, **fields} for line in lines]


def metrics(*events: dict) -> RunMetrics:
    """The events as the monitor reads them: JSON lines through a LogFollower."""
    follower = LogFollower()
    text = "".join(json.dumps(e) + "\n" for e in [START, *events])
    follower.feed(text.encode(), final=True)
    return follower.metrics


def codes(m: RunMetrics, running: bool = True, now: float | None = None) -> list[str]:
    last = m.recent_steps[-1]["time"] if m.recent_steps else T0
    return [f.code for f in watchdog.findings(m, running, last + 0.1 if now is None else now)]


# name -> (step lines, expected codes while running, shortly after the last line)
CASES = {
    "healthy": (steps(12, lag=0.01), []),
    "straggler": (steps(6, lag=0.3, rank=3), ["straggler"]),
    # Each window a different rank: a loaded machine, not one slow host.
    "slowest_rank_changes": (steps(6, lag=0.3, rank=[1, 2, 3, 1, 2, 3]), []),
    # The same rank, by less than a quarter of a step: noise.
    "small_lag": (steps(6, lag=0.1, rank=3), []),
    # Only the last two windows: not yet persistent.
    "straggler_not_yet": (steps(4, lag=0.0) + steps(2, lag=0.3, rank=3, first=10), []),
    # Warm-up windows do not count: lags there are compile and caches.
    "warmup_lag_only": (steps(2, lag=2.0, rank=3) + steps(4, lag=0.0, first=6), []),
    "throughput_degraded": (
        steps(12, rate=[900, 1000] + [1000] * 7 + [400] * 3),
        ["throughput_degraded"],
    ),
    # One slow window (an eval, a checkpoint) is not a slowdown.
    "one_slow_window": (steps(12, rate=[900, 1000] + [1000] * 8 + [300, 1000]), []),
    # Not below half the baseline.
    "mild_slowdown": (steps(12, rate=[900, 1000] + [1000] * 7 + [600] * 3), []),
    # NVML's utilisation of the ranks' GPUs, mean and lowest (issue 48).
    "gpus_idle": (gpu(steps(6), gpu_util_mean=31.5, gpu_util_min_rank=2), ["gpus_idle"]),
    "gpus_busy": (gpu(steps(6), gpu_util_mean=93.0, gpu_util_min_rank=2), []),
    # One busy window among idle ones: not persistently idle.
    "gpus_idle_not_yet": (
        gpu(steps(4), gpu_util_mean=30.0)
        + gpu(steps(1, first=10), gpu_util_mean=90.0)
        + gpu(steps(1, first=12), gpu_util_mean=30.0),
        [],
    ),  # fmt: skip
    "gpu_throttled": (
        gpu(steps(6), gpu_throttled={"5": ["hw_slowdown"]}, gpu_sm_clock_mhz_min=1005.0),
        ["gpu_throttled"],
    ),
    # Each window another GPU at its power cap: the fleet's power policy, not one GPU.
    "throttle_moves": (
        [
            {**line, "gpu_throttled": {str(i % 3): ["sw_power_cap"]}}
            for i, line in enumerate(steps(6))
        ],
        [],
    ),  # fmt: skip
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_case(name):
    lines, expected = CASES[name]
    assert codes(metrics(*lines)) == expected


def test_every_watched_code_is_in_the_doctors_table_with_a_hint_and_a_case():
    assert set(WATCHED) == set(watchdog.CODES)
    for code in WATCHED:
        assert CODES[code].retryable == watchdog.CODES[code][2]
        assert CODES[code].remediation == watchdog.CODES[code][1]
    shown = {c for lines, expected in CASES.values() for c in expected} | {"job_hung"}
    assert shown == set(WATCHED)


def test_the_straggler_finding_names_the_rank_its_host_and_its_lag():
    (found,) = watchdog.findings(metrics(*steps(6, lag=0.3, rank=3)), False, T0)
    assert (found.code, found.rank, found.host) == ("straggler", 3, "ip-10-0-0-9")
    assert "rank 3 on host ip-10-0-0-9" in found.message and "0.30 s per step" in found.message
    assert found.hint == CODES["straggler"].remediation


def test_job_hung_after_five_times_the_gap_between_step_lines():
    m = metrics(*steps(6))  # 0.5 s a step, a line every 2 steps: 1 s apart
    last = m.recent_steps[-1]["time"]
    limit = max(watchdog.HUNG_STEPS * 1.0, watchdog.HUNG_FLOOR_S)
    assert codes(m, now=last + limit - 0.5) == []
    assert codes(m, now=last + limit + 0.5) == ["job_hung"]
    assert codes(m, running=False, now=last + 1000) == []  # a job that ended is not hung
    (hung,) = watchdog.findings(m, True, last + 60)
    assert "no step line for 60 s" in hung.message and "the last was step 12" in hung.message
    assert "collective timeout 300 s (the job fails by itself in about 240 s)" in hung.message
    assert "NCCL flight recorder dumps: /runs/j/nccl_traces/rank_<rank>" in hung.message
    assert hung.details["collective_timeout_s"] == 300.0


def test_a_checkpoint_save_gets_longer_than_a_step_before_a_hang():
    # Step 50 is a checkpoint step: the line comes, then the save, with no line.
    lines = steps(25)  # steps 2..50
    first_save = metrics(*lines)
    last = lines[-1]["time"]
    assert codes(first_save, now=last + 60) == []  # the first save: FIRST_SAVE_S
    assert codes(first_save, now=last + watchdog.FIRST_SAVE_S + 1) == ["job_hung"]
    # A save seen before (blocked 10 s): three times that.
    saved = {"event": "checkpoint_saved", "step": 50, "path": "/c/step_50", "blocked_s": 10.0}
    later = steps(25, first=52)
    m = metrics(*lines, saved, *later)
    last = later[-1]["time"]
    assert later[-1]["step"] == 100  # another checkpoint step
    assert codes(m, now=last + 29) == []
    assert codes(m, now=last + 31) == ["job_hung"]


def test_a_new_attempt_starts_its_own_baseline_and_windows():
    m = RunMetrics()
    for event in [START, *steps(6, lag=0.3, rank=3), START]:
        m.add(event)
    assert not m.recent_steps and not m.first_steps and codes(m) == []


@pytest.mark.parametrize(
    ("after_s", "hung"),
    [(10.0, False), (99.0, False), (100.0, True), (101.0, True)],
    ids=["the-5s-rule-without-log_freq", "just-under", "at", "just-over"],
)
def test_the_hung_limit_counts_the_steps_between_log_lines(after_s, hung):
    """A healthy job logging every 10th step of 2 s (a line every 20 s) is hung only after
    5 gaps between lines (100 s), not 5 steps (10 s): sizes where the 5 s floor hides
    nothing."""
    follower = LogFollower()
    start = {**START, "log_freq": 10, "checkpoint_freq": 1000}
    line = {
        "event": "step",
        "loss": 3.0,
        "step_s": 2.0,
        "tokens_per_s": 1000.0,
        "slowest_rank": 0,
        "slowest_host": "ip-10-0-0-9",
        "rank_lag_s": 0.0,
    }
    lines = [{**line, "step": s, "time": T0 + s * 2.0} for s in range(10, 70, 10)]
    follower.feed("".join(json.dumps(e) + "\n" for e in [start, *lines]).encode(), final=True)
    last = lines[-1]["time"]
    assert codes(follower.metrics, now=last + after_s) == (["job_hung"] if hung else [])


def test_the_gpu_findings_name_the_rank_and_what_nvml_said():
    lines = gpu(steps(6), gpu_throttled={"5": ["hw_slowdown", "hw_thermal"]},
                gpu_sm_clock_mhz_min=1005.0)  # fmt: skip
    (found,) = watchdog.findings(metrics(*lines), False, T0)
    assert (found.code, found.rank) == ("gpu_throttled", 5)
    assert "hw_slowdown, hw_thermal" in found.message and "1005 MHz" in found.message
    (idle,) = watchdog.findings(metrics(*gpu(steps(6), gpu_util_mean=20.0,
                                             gpu_util_min_rank=1)), False, T0)  # fmt: skip
    assert idle.rank == 1 and "20% utilisation" in idle.message
    assert not CODES["gpus_idle"].retryable  # a resubmit waits on its input the same way


def test_the_job_state_shows_the_last_windows_gpus_in_one_line():
    m = metrics(*gpu(steps(3), gpu_util_mean=88.2, gpu_util_min=80.0, gpu_util_min_rank=3,
                     gpu_mem_used_mb_max=61000.0, gpu_mem_total_mb=81559.0))  # fmt: skip
    from skills.training_job_deployer.models import gpu_text

    shown = m.state_fields()["gpu"]
    assert shown["gpu_util_min_rank"] == 3
    assert gpu_text(shown) == "util 88.2%, lowest 80.0% (rank 3), mem 61000/81559 MiB"
