"""What naming the slowest rank costs (trainer/rank_times.py): the bare FSDP2 loop
(benchmarks/bare_fsdp2_loop.py) with and without it, in the same run, alternating
(2 processes; gloo on CPU, NCCL on a GPU host). With it, every rank runs the lost-time
clock thread and, every --every steps (the trainer's log steps; 10 by default), one
all_gather of a float whose result is read on the host.            goal <= 1.01x

    python benchmarks/rank_times_cost.py [--repeats 5] [--every 10] [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._launch import launcher  # noqa: E402
from benchmarks.trainer_bench import ROOT, env  # noqa: E402

MODEL = ["--model_type", "debug_large", "--seq_len", "128", "--train_batch_size", "4"]
# --quick (the test suite runs it, to prove the benchmark runs, not to measure): the
# smallest model, 2 steps after 1 of warm-up, the all_gather every step, once, both
# ways in one launch of one process with no torchrun (each rank is a torch start, and
# so is torchrun; the world size is not what a quick run is for).
QUICK = ["--model_type", "debug", "--seq_len", "32", "--train_batch_size", "1"]


def bare(everys: list[int], model: list[str], steps: int, warmup: int, quick: bool) -> list[float]:
    """One launch of the bare loop, a step time per value of `every`, in that order."""
    argv = launcher(1 if quick else 2, quick)
    args = [str(ROOT / "benchmarks" / "bare_fsdp2_loop.py"), "--steps", str(steps)]
    args += ["--warmup", str(warmup), "--rank_times_every", ",".join(map(str, everys)), *model]
    done = subprocess.run(argv + args, cwd=ROOT, env=env(), capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"benchmark run failed:\n{done.stderr[-3000:]}")
    lines = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    assert [line["rank_times_every"] for line in lines] == everys, lines
    return [float(line["step_s"]) for line in lines]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=None, help="5; --quick: 1")
    parser.add_argument("--every", type=int, default=None, help="10; --quick: 1")
    parser.add_argument("--quick", action="store_true", help="a small model, few steps")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    model, steps, warmup = (QUICK, 2, 1) if args.quick else (MODEL, 60, 5)
    args.repeats = args.repeats or (1 if args.quick else 5)
    args.every = args.every or (1 if args.quick else 10)
    runs: dict[str, list[float]] = {"bare": [], "with_rank_times": []}
    for _ in range(args.repeats):  # alternate, so drift in machine load hits both sides
        if args.quick:  # see QUICK
            without, with_ = bare([0, args.every], model, steps, warmup, True)
        else:
            (without,) = bare([0], model, steps, warmup, False)
            (with_,) = bare([args.every], model, steps, warmup, False)
        runs["bare"].append(without)
        runs["with_rank_times"].append(with_)
    med = {k: statistics.median(v) for k, v in runs.items()}
    results = {
        "step_time_ratio_with_rank_times": med["with_rank_times"] / med["bare"],
        "medians_s": med,
        "runs_s": runs,
        "every": args.every,
        "repeats": args.repeats,
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    nproc = 1 if args.quick else 2
    print(f"model {' '.join(model)}, {nproc} processes, {args.repeats} repeats, medians")
    print(
        f"step time  bare {med['bare'] * 1e3:7.1f} ms  with rank times "
        f"{med['with_rank_times'] * 1e3:7.1f} ms  ratio "
        f"{results['step_time_ratio_with_rank_times']:.3f}x (goal <= 1.01)"
    )


if __name__ == "__main__":
    main()
