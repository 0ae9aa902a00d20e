"""Findings about a job while it runs, from the trainer's step lines alone, so every
target (local, Slurm, Kubernetes) gets the same ones:

* `straggler`: the same rank cost the most time per step (trainer/rank_times.py: time
  its process could not run, or its slower GPU's extra compute) in
  STRAGGLER_WINDOWS log windows in a row, each time by at least STRAGGLER_LAG of the
  step time (and LAG_FLOOR_S): one slow rank holds every other rank back;
* `throughput_degraded`: tokens/s over the last RECENT_WINDOWS windows fell below
  DEGRADED_FRACTION of the job's own baseline (the median of BASELINE_WINDOWS windows
  after WARMUP_WINDOWS of warm-up, per attempt);
* `gpus_idle`: the ranks' GPUs averaged under IDLE_UTIL_PCT utilisation (NVML, sampled by
  each rank: trainer/gpu_telemetry.py) in RECENT_WINDOWS log windows in a row after
  warm-up: the job waits on its input or on communication, not on compute;
* `gpu_throttled`: the same rank's GPU clocks were held back (power cap, thermal or
  hardware slowdown) in RECENT_WINDOWS log windows in a row;
* `job_hung`: no step line for HUNG_STEPS times the gap between step lines (HUNG_FLOOR_S
  at least; while a checkpoint is saved, SAVE_FACTOR times the longest save seen, or
  FIRST_SAVE_S before any).

Thresholds are relative to the job's own timings and need persistence, so a loaded
machine that slows every rank alike makes no finding. The codes' meaning and fix are
CODES here (the doctor's table, skills/job_doctor/failure_signatures.py, takes them
in); a finding says which rank, host and numbers.
"""

from __future__ import annotations

import statistics
from typing import Any

from skills.training_job_deployer.models import WatchFinding
from skills.training_job_deployer.trainer_log import RunMetrics

STRAGGLER_WINDOWS = 3
STRAGGLER_LAG = 0.25  # of the step time
LAG_FLOOR_S = 0.05
WARMUP_WINDOWS = 2
BASELINE_WINDOWS = 5
RECENT_WINDOWS = 3
DEGRADED_FRACTION = 0.5
HUNG_STEPS = 5
HUNG_FLOOR_S = 5.0
SAVE_FACTOR = 3.0
FIRST_SAVE_S = 120.0
IDLE_UTIL_PCT = 50.0

# code -> (root cause, fix, whether a resubmit can help): the doctor's CODES rows.
CODES: dict[str, tuple[str, str, bool]] = {
    "straggler": (
        "one rank is persistently slower than the others and every rank waits for it at "
        "each collective (a throttled or starved host, a noisy neighbour, a stopped process)",
        "look at the named host (CPU throttling, other work, memory pressure, dmesg); "
        "move the job off it (cordon the node and resubmit) if it stays slow",
        True,
    ),
    "throughput_degraded": (
        "tokens/s fell well below what this job did after warm-up (a straggler, a degraded "
        "network link, contention on the hosts or the storage)",
        "check the straggler finding and the hosts' load; a resubmit on other nodes "
        "resumes from the newest checkpoint",
        True,
    ),
    "gpus_idle": (
        "the GPUs sit mostly idle between steps: the job waits on its input (data loading, "
        "tokenizing, host-to-device copies) or on communication, not on compute",
        "make the GPUs' work larger per step (a bigger train_batch_size or seq_len), keep "
        "data local and pre-tokenized, and check the network (EFA in use, NCCL_DEBUG=INFO)",
        False,
    ),
    "gpu_throttled": (
        "a GPU runs at reduced clocks (power cap, thermal or hardware slowdown) and every "
        "rank waits for it at each collective",
        "check the named GPU's cooling and power (nvidia-smi -q -d PERFORMANCE on its node); "
        "cordon the node and resubmit if a hardware slowdown persists",
        True,
    ),
    "job_hung": (
        "no training step for several step times: a rank is stuck in a collective or in "
        "I/O, and the job holds its GPUs doing nothing until the collective timeout",
        "stop the job and resubmit it (auto_retry does both), resuming from the newest "
        "checkpoint; the NCCL flight recorder's dumps, where written, show the stuck "
        "collective",
        True,
    ),
}


def findings(metrics: RunMetrics, running: bool, now: float) -> list[WatchFinding]:
    """The watchdog's findings for the current attempt's step lines (`job_hung` only for a
    running job; `now`: this host's wall clock, against the step lines' `time`)."""
    found = [
        straggler(metrics),
        throughput_degraded(metrics),
        gpus_idle(metrics),
        gpu_throttled(metrics),
    ]
    if running:
        found.append(job_hung(metrics, now))
    return [f for f in found if f is not None]


def _finding(code: str, message: str, **fields: Any) -> WatchFinding:
    return WatchFinding(code=code, message=message, hint=CODES[code][1], **fields)


def _timed(metrics: RunMetrics) -> list[dict[str, Any]]:
    """The attempt's recent step lines after its first WARMUP_WINDOWS (compile, first
    all-gathers, caches filling), those that carry a step time."""
    if len(metrics.first_steps) < WARMUP_WINDOWS:
        return []
    warm = int(metrics.first_steps[WARMUP_WINDOWS - 1]["step"])
    return [e for e in metrics.recent_steps if e.get("step_s") and int(e["step"]) > warm]


def straggler(metrics: RunMetrics) -> WatchFinding | None:
    windows = [e for e in _timed(metrics) if e.get("slowest_rank") is not None]
    last = windows[-STRAGGLER_WINDOWS:]
    if len(last) < STRAGGLER_WINDOWS or len({e["slowest_rank"] for e in last}) != 1:
        return None
    if not all(
        float(e.get("rank_lag_s") or 0.0) >= max(STRAGGLER_LAG * e["step_s"], LAG_FLOOR_S)
        for e in last
    ):
        return None
    rank, host = last[-1]["slowest_rank"], last[-1].get("slowest_host")
    lag = statistics.median(float(e["rank_lag_s"]) for e in last)
    step_s = statistics.median(float(e["step_s"]) for e in last)
    return _finding(
        "straggler",
        f"rank {rank} on host {host} is the straggler: it cost {lag:.2f} s per step more "
        f"than the other ranks (steps take {step_s:.2f} s) in the last {len(last)} log "
        f"windows, steps {last[0]['step']}-{last[-1]['step']}",
        rank=rank,
        host=host,
        details={"lag_s": round(lag, 4), "step_s": round(step_s, 4)},
    )


def throughput_degraded(metrics: RunMetrics) -> WatchFinding | None:
    rates = [float(e["tokens_per_s"]) for e in _timed(metrics) if e.get("tokens_per_s")]
    # The baseline: the attempt's first windows after warm-up, which RunMetrics keeps
    # (first_steps) however long the job runs.
    first = metrics.first_steps[WARMUP_WINDOWS : WARMUP_WINDOWS + BASELINE_WINDOWS]
    baseline_rates = [float(e["tokens_per_s"]) for e in first if e.get("tokens_per_s")]
    recent = rates[-RECENT_WINDOWS:]
    if len(baseline_rates) < BASELINE_WINDOWS or len(recent) < RECENT_WINDOWS:
        return None
    if int(first[-1]["step"]) >= int(metrics.recent_steps[-RECENT_WINDOWS]["step"]):
        return None  # the recent windows are the baseline's own
    baseline, now = statistics.median(baseline_rates), statistics.median(recent)
    if now >= DEGRADED_FRACTION * baseline:
        return None
    return _finding(
        "throughput_degraded",
        f"tokens/s fell to {now:,.0f}, {now / baseline:.0%} of this job's baseline of "
        f"{baseline:,.0f} after warm-up (the last {len(recent)} log windows, to step "
        f"{metrics.recent_steps[-1]['step']})",
        details={"tokens_per_s": round(now, 1), "baseline_tokens_per_s": round(baseline, 1)},
    )


def _steps_span(last: list[dict[str, Any]]) -> str:
    return f"the last {len(last)} log windows, steps {last[0]['step']}-{last[-1]['step']}"


def gpus_idle(metrics: RunMetrics) -> WatchFinding | None:
    last = [e for e in _timed(metrics) if e.get("gpu_util_mean") is not None][-RECENT_WINDOWS:]
    if len(last) < RECENT_WINDOWS or any(e["gpu_util_mean"] >= IDLE_UTIL_PCT for e in last):
        return None
    util = statistics.median(float(e["gpu_util_mean"]) for e in last)
    low = last[-1].get("gpu_util_min_rank")
    return _finding(
        "gpus_idle",
        f"the GPUs averaged {util:.0f}% utilisation in {_steps_span(last)} (under "
        f"{IDLE_UTIL_PCT:.0f}%; lowest: rank {low}): the job waits on input or communication",
        rank=low,
        details={"gpu_util_mean": round(util, 1)},
    )


def gpu_throttled(metrics: RunMetrics) -> WatchFinding | None:
    last = _timed(metrics)[-RECENT_WINDOWS:]
    if len(last) < RECENT_WINDOWS:
        return None
    ranks = set.intersection(*(set(e.get("gpu_throttled") or {}) for e in last))
    if not ranks:
        return None
    rank = min(ranks, key=int)
    reasons = sorted({r for e in last for r in e["gpu_throttled"][rank]})
    clock = last[-1].get("gpu_sm_clock_mhz_min")
    at = f" (lowest SM clock {clock:.0f} MHz)" if clock else ""
    return _finding(
        "gpu_throttled",
        f"rank {rank}'s GPU was throttled ({', '.join(reasons)}) in {_steps_span(last)}{at}",
        rank=int(rank),
        details={"reasons": reasons, "sm_clock_mhz_min": clock},
    )


def job_hung(metrics: RunMetrics, now: float) -> WatchFinding | None:
    timed = [e for e in metrics.recent_steps if e.get("time") and e.get("step_s")]
    if not timed or metrics.summary is not None or metrics.error is not None:
        return None
    last = timed[-1]
    start = metrics.start or {}
    log_freq = int(start.get("log_freq") or 1)
    step_s = statistics.median(float(e["step_s"]) for e in (_timed(metrics) or timed))
    limit = max(HUNG_STEPS * step_s * log_freq, HUNG_FLOOR_S)
    saving = _saving_after(metrics, last)
    if saving:
        longest = metrics.longest_save_s
        limit = max(limit, SAVE_FACTOR * longest if longest else FIRST_SAVE_S)
    quiet = now - float(last["time"])
    if quiet < limit:
        return None
    timeout = start.get("collective_timeout_s")
    during = ", during a checkpoint save" if saving else ""
    parts = [
        f"no step line for {quiet:.0f} s (the limit: {limit:.0f} s, {HUNG_STEPS} x "
        f"{step_s * log_freq:.1f} s between step lines{during})",
        f"the last was step {last['step']}, logged by rank 0",
    ]
    if last.get("slowest_rank") is not None:
        parts.append(f"the slowest rank then: {last['slowest_rank']} on {last.get('slowest_host')}")
    if timeout:
        left = float(timeout) - quiet
        parts.append(
            f"collective timeout {float(timeout):.0f} s"
            + (f" (the job fails by itself in about {left:.0f} s)" if left > 0 else "")
        )
    dumps = start.get("nccl_flight_recorder")
    if dumps:
        parts.append(f"NCCL flight recorder dumps: {dumps}")
    return _finding(
        "job_hung",
        "; ".join(parts),
        rank=last.get("slowest_rank"),
        host=last.get("slowest_host"),
        details={
            "quiet_s": round(quiet, 1),
            "limit_s": round(limit, 1),
            "last_step": last["step"],
            "collective_timeout_s": timeout,
            "nccl_flight_recorder": dumps,
        },
    )


def _saving_after(metrics: RunMetrics, last: dict[str, Any]) -> bool:
    """Whether the trainer saves a checkpoint after this step line (none said saved yet)."""
    freq = (metrics.start or {}).get("checkpoint_freq")
    if freq is None or (metrics.checkpoint_step or 0) >= int(last["step"]):
        return False
    step = int(last["step"])
    return step == metrics.max_steps or bool(freq and step % int(freq) == 0)


__all__ = [
    "CODES",
    "findings",
    "gpu_throttled",
    "gpus_idle",
    "job_hung",
    "straggler",
    "throughput_degraded",
]
