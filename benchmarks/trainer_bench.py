"""Trainer benchmarks, each a ratio against a baseline measured in the same run
(2 processes, gloo, CPU; medians of --repeats alternating runs):

1. step time: `python -m trainer` vs the bare FSDP2 loop (benchmarks/bare_fsdp2_loop.py)
   on the same model, batch and world size.                          goal <= 1.02x
   Beside it, what each piece the trainer adds to the loop costs, measured in the bare
   loop with that piece added (`--adds`: the gradient norm and clip, the chunked head,
   the agreement all-reduce, the per-rank times; then all four), ms per step over bare.
2. tokens/s: our model vs Hugging Face LlamaForCausalLM of the same dims, both in
   the bare loop under the same FSDP2 wrapping and batch.             goal >= 1.0x
3. time the loop is blocked by a checkpoint save: async vs sync.      goal <= 0.25x

    python benchmarks/trainer_bench.py [--repeats 3] [--json] [--goals]

--goals: only the two goals' ratios (1 and 2: three launches a repeat, not ten), for a
quiet window too short for the whole benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._launch import launch  # noqa: E402

QUICK = "--quick" in sys.argv
# Big enough that compute, not per-step bookkeeping noise, dominates a step. --quick (the
# test suite runs it, to prove the benchmark runs, not to measure): the smallest model
# and batch, 2 steps after 1 of warm-up, once, in 3 launches, not 5 (a launch is most
# of a quick run's time): both bare loops in one, and the step time read from the sync
# checkpoint run (its periodic saves count in it: a measurement would not do that).
MODEL = (
    ["--model_type", "debug", "--seq_len", "32", "--train_batch_size", "1"]
    if QUICK
    else ["--model_type", "debug_large", "--seq_len", "128", "--train_batch_size", "4"]
)
WARMUP, STEPS = (1, 2) if QUICK else (5, 30)
# --quick: one process per launch, and no torchrun (each rank is a torch start, and so
# is torchrun; the world size is not what a quick run is for), else 2.
NPROC = 1 if QUICK else 2
# The checkpoint runs: this many steps, a periodic save every SAVE_FREQ (the last step's
# save, always synchronous, is left out of the mean).
SAVE_STEPS, SAVE_FREQ = (WARMUP + STEPS, 1) if QUICK else (21, 5)


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), e.get("PYTHONPATH")]))
    return e


def torchrun(args: list[str]) -> list[dict]:
    code, stdout, stderr = launch(NPROC, QUICK, args, env(), ROOT)
    if code != 0:
        sys.exit(f"benchmark run failed:\n{stderr[-3000:]}")
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def bare(*impls: str) -> list[dict]:
    """One launch of the bare loop, a line per impl (run one after the other)."""
    args = [str(ROOT / "benchmarks" / "bare_fsdp2_loop.py"), "--impl", ",".join(impls)]
    lines = torchrun(args + ["--steps", str(STEPS), "--warmup", str(WARMUP), *MODEL])
    assert [line["impl"] for line in lines] == list(impls), lines
    return lines


def step_s(events: list[dict]) -> float:
    """Seconds per step after the warm-up, from the trainer's own step lines."""
    elapsed = {e["step"]: e["elapsed_s"] for e in events if e["event"] == "step"}
    return (elapsed[WARMUP + STEPS] - elapsed[WARMUP]) / STEPS


# The trainer's pieces, one at a time and then together (bare_fsdp2_loop.py --adds).
PIECES = ("norm", "head", "agree", "ranks")
PIECE_NAMES = {"norm": "grad norm + clip", "head": "chunked head", "agree": "agreement",
               "ranks": "per-rank times", "+".join(sorted(PIECES)): "all four"}  # fmt: skip


def pieces() -> dict[str, float]:
    """Seconds per step of the bare loop alone ("none") and with each piece added, in one
    launch (bare first and last: the drift within the launch shows)."""
    variants = ["none", *PIECES, "+".join(PIECES), "none"]
    args = [str(ROOT / "benchmarks" / "bare_fsdp2_loop.py"), "--adds", ",".join(variants)]
    lines = torchrun(args + ["--steps", str(STEPS), "--warmup", str(WARMUP), *MODEL])
    found: dict[str, list[float]] = {}
    for line in lines:
        found.setdefault(line["adds"], []).append(line["step_s"])
    return {name: statistics.mean(times) for name, times in found.items()}


def trainer_step_s() -> float:
    events = torchrun(
        ["-m", "trainer", *MODEL, "--max_steps", str(WARMUP + STEPS), "--log_freq", str(WARMUP)]
        + ["--validation_freq", "0"]
    )
    return step_s(events)


def checkpointed(async_save: bool, log_freq: int = 100) -> list[dict]:
    """The events of a run that saves every SAVE_FREQ steps."""
    with tempfile.TemporaryDirectory() as ckpt:
        return torchrun(
            ["-m", "trainer", *MODEL, "--max_steps", str(SAVE_STEPS), "--log_freq", str(log_freq)]
            + ["--validation_freq", "0", "--checkpoint_dir", ckpt]
            + ["--checkpoint_freq", str(SAVE_FREQ), "--async_save", str(async_save).lower()]
        )


def blocked_s(events: list[dict], async_save: bool) -> float:
    """Mean seconds the loop waited per periodic checkpoint (the final, always
    synchronous save is left out)."""
    saves = [e for e in events if e["event"] == "checkpoint_saved" and e["step"] != SAVE_STEPS]
    assert all(s["async_save"] is async_save for s in saves), saves
    return statistics.mean(s["blocked_s"] for s in saves)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="see QUICK")
    parser.add_argument("--goals", action="store_true", help="only the two goals' ratios")
    args = parser.parse_args()
    if args.quick:
        args.repeats = 1

    runs: dict[str, list[float]] = {
        k: [] for k in ("bare", "trainer", "ours", "hf", "sync", "async")
    }
    added: dict[str, list[float]] = {}
    for _ in range(args.repeats):  # alternate, so drift in machine load hits both sides
        if QUICK:  # see QUICK
            ours, hf = bare("ours", "hf")
            sync = checkpointed(False, log_freq=WARMUP)
            trainer = step_s(sync)
        else:
            (ours,) = bare("ours")
            trainer = trainer_step_s()
            (hf,) = bare("hf")
            sync = [] if args.goals else checkpointed(False)
        runs["bare"].append(ours["step_s"])
        runs["ours"].append(ours["tokens_per_s"])
        runs["trainer"].append(trainer)
        runs["hf"].append(hf["tokens_per_s"])
        if args.goals:
            continue
        runs["sync"].append(blocked_s(sync, False))
        runs["async"].append(blocked_s(checkpointed(True), True))
        for name, seconds in pieces().items():
            added.setdefault(name, []).append(seconds)
    med = {k: statistics.median(v) for k, v in runs.items() if v}
    cost = {k: statistics.median(v) for k, v in added.items()}
    results = {
        "step_time_ratio_vs_bare_fsdp2": med["trainer"] / med["bare"],
        "tokens_per_s_ratio_vs_hf_llama": med["ours"] / med["hf"],
        "async_vs_sync_blocked_ratio": med["async"] / med["sync"] if "sync" in med else None,
        "medians": med,
        "pieces_s": cost,
        "repeats": args.repeats,
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"model {' '.join(MODEL)}, {NPROC} processes (gloo, CPU), {args.repeats} repeats, medians"
    )
    print(
        f"step time   trainer {med['trainer'] * 1e3:7.1f} ms  bare FSDP2 {med['bare'] * 1e3:7.1f}"
        f" ms  ratio {results['step_time_ratio_vs_bare_fsdp2']:.3f}x (goal <= 1.02)"
    )
    for name, label in PIECE_NAMES.items() if cost else ():  # each piece added to bare
        extra = cost[name] - cost["none"]
        print(
            f"  + {label:17s} {extra * 1e3:+7.1f} ms a step ({extra / cost['none']:+.1%} of"
            f" the bare loop's {cost['none'] * 1e3:.1f} ms in the same launch)"
        )
    print(
        f"tokens/s    ours {med['ours']:9.0f}  HF Llama {med['hf']:9.0f}"
        f"  ratio {results['tokens_per_s_ratio_vs_hf_llama']:.3f}x (goal >= 1.0)"
    )
    if args.goals:
        return
    print(
        f"ckpt block  async {med['async'] * 1e3:7.1f} ms  sync {med['sync'] * 1e3:7.1f} ms"
        f"  ratio {results['async_vs_sync_blocked_ratio']:.3f}x (goal <= 0.25)"
    )


if __name__ == "__main__":
    main()
