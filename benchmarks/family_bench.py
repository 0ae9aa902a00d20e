"""Every decoder family the trainer builds from transformers (trainer/families.py), and
Llama (which the trainer runs on its own model, trainer/model.py), each against the bare
FSDP2 loop (benchmarks/bare_fsdp2_loop.py --impl family: transformers' class, meta init)
on the SAME checkpoint, in the same run (2 processes, gloo, CPU):

1. tokens/s: `python -m trainer --model_name_or_path DIR` / the bare loop.
2. peak memory of rank 0 up to its first optimizer step (RSS on CPU): the trainer's
   first step line / the bare loop's.                              goal <= 1.1x

Each checkpoint is a random one of the family written here (no hub): `--shape small`
hidden 256, 4 layers, vocabulary 2048; `--shape 60m` hidden 512, 8 layers, vocabulary
32000 (58M parameters: the shard, not the process, dominates the memory). Prints a
Markdown table (or --json lines).

    python benchmarks/family_bench.py [--families llama,mistral] [--shape 60m] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._launch import launch  # noqa: E402
from tests.trainer.test_families import FAMILIES  # noqa: E402  (the parity test's table)

SHAPE = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4,
             num_attention_heads=8, num_key_value_heads=4, vocab_size=2048,
             max_position_embeddings=512, pad_token_id=0, bos_token_id=1,
             eos_token_id=2)  # fmt: skip
SHAPES = {
    "small": SHAPE,
    "60m": {**SHAPE, "hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 8,
            "num_key_value_heads": 8, "vocab_size": 32000},
}  # fmt: skip
BATCH = ["--seq_len", "128", "--train_batch_size", "4"]
STEPS = 10
# --quick (the test suite runs it, to prove the benchmark still runs, not to measure):
# the first family, 2 layers of width 64 (the parity test's size), 2 steps, the
# sequence and batch cut down: the same trainer and bare-loop runs, each as short as
# they go.
QUICK_STEPS = 2
QUICK_SHAPE = {**SHAPE, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512}  # fmt: skip
QUICK_BATCH = ["--seq_len", "32", "--train_batch_size", "2"]
# Processes per run: --quick, one, with no torchrun (each rank is a torch start, and so
# is torchrun).
QUICK = "--quick" in sys.argv
NPROC = 1 if QUICK else 2


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), e.get("PYTHONPATH")]))
    e.setdefault("OMP_NUM_THREADS", "1")
    return e


def torchrun(args: list[str]) -> list[dict]:
    code, stdout, stderr = launch(NPROC, QUICK, args, env(), ROOT)
    if code != 0:
        raise SystemExit(f"{' '.join(args[:3])} failed:\n{stderr[-3000:]}")
    return [json.loads(ln) for ln in stdout.splitlines() if ln.startswith("{")]


def checkpoint(model_type: str, out: Path, shape: dict[str, int]) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    extra = dict(FAMILIES.get(model_type, {}))  # llama: none
    if model_type == "gpt2":
        extra.update(n_embd=shape["hidden_size"], n_layer=shape["num_hidden_layers"],
                      n_head=shape["num_attention_heads"], n_positions=512)  # fmt: skip
    config = AutoConfig.for_model(model_type, **shape, **extra)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(out)


def measure(
    model_type: str,
    tmp: Path,
    shape: dict[str, int],
    steps: int = STEPS,
    batch: list[str] = BATCH,
) -> dict[str, object]:
    path = tmp / model_type
    checkpoint(model_type, path, shape)
    model = ["--model_name_or_path", str(path), *batch]
    events = torchrun(
        ["-m", "trainer", *model, "--max_steps", str(steps), "--log_freq", "1",
         "--validation_freq", "0", "--warmup_steps", "2"]
    )  # fmt: skip
    first = next(e for e in events if e["event"] == "step")
    summary = next(e for e in events if e["event"] == "summary")
    (bare,) = torchrun(
        ["benchmarks/bare_fsdp2_loop.py", "--impl", "family", "--steps", str(steps - 1),
         "--warmup", "1", *model]
    )  # fmt: skip
    return {
        "family": model_type,
        "params": summary["params"],
        "tokens_per_s": summary["tokens_per_s"],
        "bare_tokens_per_s": round(bare["tokens_per_s"], 1),
        "speed_ratio": round(summary["tokens_per_s"] / bare["tokens_per_s"], 3),
        "peak_first_step_mb": first["mem_mb"],
        "bare_peak_first_step_mb": bare["peak_first_step_mb"],
        "memory_ratio": round(first["mem_mb"] / bare["peak_first_step_mb"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default=",".join(["llama", *FAMILIES]))
    parser.add_argument("--shape", choices=sorted(SHAPES), default="small")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true",
                        help="the first family only, tiny and short (the suite runs it)")
    args = parser.parse_args()
    families = args.families.split(",")[:1] if args.quick else args.families.split(",")
    rows = []
    with tempfile.TemporaryDirectory(prefix="family-bench-") as tmp:
        for model_type in families:
            if args.quick:
                row = measure(model_type, Path(tmp), QUICK_SHAPE, QUICK_STEPS, QUICK_BATCH)
            else:
                row = measure(model_type, Path(tmp), SHAPES[args.shape])
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
    if not args.json:
        print("| family | params | tokens/s trainer / bare | peak MiB at step 1 trainer / bare |")
        print("|---|---|---|---|")
        for r in rows:
            print(
                f"| {r['family']} | {r['params']:,} | {r['tokens_per_s']:,.0f} / "
                f"{r['bare_tokens_per_s']:,.0f} = {r['speed_ratio']:.2f}x | "
                f"{r['peak_first_step_mb']:,.0f} / {r['bare_peak_first_step_mb']:,.0f} = "
                f"{r['memory_ratio']:.2f}x |"
            )


if __name__ == "__main__":
    main()
