"""MFU and tokens/s per GPU of the trainer against the bare FSDP2 loop
(benchmarks/bare_fsdp2_loop.py), same model, batch, world and device, same run.

The model is Llama-3-8B-shaped (dim 4096, 32 heads, 8 KV heads, FFN 14336, vocabulary
128256) with as many layers as one GPU holds with its share of the optimizer state.
On a GPU host it uses every GPU (one process each); on a CPU host it proves the
benchmark works with a tiny layer count, sequence and vocabulary (no MFU: a CPU has
no peak in the table).

    python benchmarks/gpu_mfu.py                 # defaults for the host it runs on
    python benchmarks/gpu_mfu.py --n_layers 4 --seq_len 4096 --json
"""

from __future__ import annotations

import argparse
import glob
import json
import random
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._launch import launch  # noqa: E402
from benchmarks.trainer_bench import env  # noqa: E402

# Llama 3 8B, HF config: 2 x (vocab x dim) of embedding and lm_head, 218M per layer.
SHAPE = ["--model_type", "llama_v3_8b"]
# --quick (the test suite runs it): the debug model's shape, 2 steps, once: that the
# benchmark runs, not what it measures (one 8B-shaped layer takes minutes a step on CPU).
QUICK_SHAPE = ["--model_type", "debug"]
# (n_layers, seq_len, batch, vocab) per host kind. On an 80 GB GPU: 16 bytes per
# parameter of state (fp32 params, grads, 2 Adam moments; 1.05B of embedding and
# lm_head plus 0.22B per layer), sharded over the GPUs, plus the activations of an 8k
# sequence (about 1.3 GB per layer without recomputation): 8 layers fit with room on 8
# GPUs. CPU: a smoke run that proves the benchmark works.
GPU_DEFAULTS = (8, 8192, 1, None)
CPU_DEFAULTS = (1, 32, 1, 2048)
KEYS = ("step_s", "tokens_per_s_per_device", "mfu")


# A GPU's device nodes: NVIDIA's, ROCm's, WSL's.
GPU_NODES = ("/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dxg")


def gpus(quick: bool = False) -> int:
    """The GPUs torch sees; --quick on a host with no GPU device node: 0, without
    importing torch (a torch start, a fifth of a quick run)."""
    if quick and not any(glob.glob(pattern) for pattern in GPU_NODES):
        return 0
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def default_sizes(n_gpus: int, quick: bool) -> tuple[int, int, int, int | None]:
    """(n_layers, seq_len, batch, vocab) unless flags say otherwise. --quick is the
    smallest size on any host: the debug model holds 512 positions, so the GPU sizes
    failed its config check on a GPU host (seen on an H100)."""
    return GPU_DEFAULTS if n_gpus and not quick else CPU_DEFAULTS


def torchrun(nproc: int, args: list[str]) -> list[dict]:
    # --quick with 1 process (on CPU): in this process, no torchrun
    code, stdout, stderr = launch(nproc, "--quick" in sys.argv, args, env(), ROOT)
    if code != 0:
        sys.exit(f"benchmark run failed:\n{stderr[-3000:]}")
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def median_of(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs]
    return None if any(v is None for v in values) else statistics.median(values)


def text_file(directory: str, windows: int, seq_len: int) -> str:
    """Enough bytes of text for `windows` training windows (the bundled corpus is too
    small for long sequences on many GPUs)."""
    rng = random.Random(0)
    words = ["the", "model", "shards", "its", "weights", "over", "every", "GPU", "and"]
    size = 2 * windows * (seq_len + 1) + 4096
    text = " ".join(rng.choice(words) for _ in range(size // 4))
    path = Path(directory) / "bench.txt"
    path.write_text(text)
    return str(path)


def run_both(
    nproc: int, model: list[str], data: list[str], args: argparse.Namespace, runs: dict
) -> None:
    """One bare-loop run and one trainer run, same model, batch and processes."""
    bare = [str(ROOT / "benchmarks" / "bare_fsdp2_loop.py"), "--impl", "ours"]
    bare += ["--steps", str(args.steps), "--warmup", str(args.warmup), *model]
    (line,) = torchrun(nproc, bare)
    runs["bare"].append(line)
    total = args.warmup + args.steps
    events = torchrun(
        nproc,
        ["-m", "trainer", *model, *data, "--max_steps", str(total)]
        + ["--log_freq", str(args.warmup), "--validation_freq", "0", "--validation_split", "0"],
    )
    steps = {e["step"]: e for e in events if e["event"] == "step"}
    start = events[0]
    step_s = (steps[total]["elapsed_s"] - steps[args.warmup]["elapsed_s"]) / args.steps
    per_device = start["tokens_per_step"] / step_s / start["world_size"]
    mfu = steps[total]["mfu"]  # over the interval since the last log line
    runs["trainer"].append({"step_s": step_s, "tokens_per_s_per_device": per_device, "mfu": mfu})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n_layers", type=int)
    parser.add_argument("--seq_len", type=int)
    parser.add_argument("--train_batch_size", type=int)
    parser.add_argument("--vocab_size", type=int)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="2 steps after 1 of warm-up, once (the test suite runs it)")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.warmup, args.repeats = 2, 1, 1

    n_gpus = gpus(args.quick)
    layers, seq, batch, vocab = default_sizes(n_gpus, args.quick)
    nproc = n_gpus or (1 if args.quick else 2)  # --quick on CPU: 1 (a rank is a torch start)
    seq, batch = args.seq_len or seq, args.train_batch_size or batch
    model = [*(QUICK_SHAPE if args.quick else SHAPE), "--n_layers", str(args.n_layers or layers)]
    model += ["--seq_len", str(seq), "--train_batch_size", str(batch)]
    if args.vocab_size or vocab:
        model += ["--vocab_size", str(args.vocab_size or vocab)]
    runs: dict[str, list[dict]] = {"bare": [], "trainer": []}
    with tempfile.TemporaryDirectory() as tmp:
        data = ["--dataset", text_file(tmp, 2 * nproc * batch, seq)]
        for _ in range(args.repeats):
            run_both(nproc, model, data, args, runs)
    med = {kind: {key: median_of(rs, key) for key in KEYS} for kind, rs in runs.items()}
    result = {
        "device": runs["bare"][0]["device"],
        "processes": nproc,
        "model": model,
        "bare": med["bare"],
        "trainer": med["trainer"],
        "tokens_per_s_ratio_trainer_vs_bare": (
            med["trainer"]["tokens_per_s_per_device"] / med["bare"]["tokens_per_s_per_device"]
        ),
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    shape = "debug" if args.quick else "Llama-3-8B"
    print(f"{result['device']} x {nproc}, {shape} shape: {' '.join(model[2:])}")
    for kind in ("bare", "trainer"):
        r = med[kind]
        mfu = "n/a (no peak for this device)" if r["mfu"] is None else f"{r['mfu']:.1%}"
        print(
            f"{kind:8s} {r['tokens_per_s_per_device']:10.1f} tokens/s/GPU  "
            f"step {r['step_s'] * 1e3:8.1f} ms  MFU {mfu}"
        )
    print(f"trainer / bare tokens/s: {result['tokens_per_s_ratio_trainer_vs_bare']:.3f}x")


if __name__ == "__main__":
    main()
