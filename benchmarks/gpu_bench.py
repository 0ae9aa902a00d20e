"""One GPU benchmark of the trainer for any GPU host, run with that host's own python
(torch 2.11 or newer with CUDA, the trainer's few imports; nothing of this project
installed: the checkout on PYTHONPATH):

    PYTHONPATH=. python3 benchmarks/gpu_bench.py            # about 6 minutes on one H100
    PYTHONPATH=. python3 benchmarks/gpu_bench.py --quick    # the pieces a CPU can run

One line per figure, `gpu_bench <figure>: key=value ...`:

  env      the GPU (name, compute capability, memory), driver, torch, CUDA, and the
           features the trainer relies on, checked by presence (never by version string)
  bare     the bare FSDP2 loop (benchmarks/bare_fsdp2_loop.py) on a ~1B Llama (the
           Llama-3.2-1B shape), sequence 4096 x 2: step, tokens/s/GPU, MFU, peak and
           reserved memory
  trainer  `python -m trainer`, same model, tokens and GPU: the same figures, and the
           ratios to the bare loop
  kernels  the fused cross-entropy (the chunked head's autograd Function) and fused AdamW
           really ran (calls counted, the optimizer's flags, the clip as grad_scale and
           the on-device skip as found_inf)
  syncs    host syncs on non-log steps: torch.cuda.set_sync_debug_mode("error") on them
           (a sync raises and fails the run), "warn" on log steps (counted)
  ckpt     an async save at a non-log step on CUDA, then a resume from it: the resumed
           run's losses against an unbroken run's
  fr_dump  a forced collective timeout (a GPU sleep before an all-reduce, NCCL timeout
           5 s, torchrun's TORCH_NCCL_ASYNC_ERROR_HANDLING=1) leaves the flight-recorder
           dump where the trainer's settings put it
  float8   --float8 against bf16, both compiled, same model: tokens/s/GPU, MFU against
           the bf16 peak and the fp8 peak, the last loss of each (refused below SM 8.9)
  done     seconds in all, and the figures that failed

A figure that cannot run here says `skipped` and why; one that ran and is wrong says
`FAIL` and the benchmark exits 1. On a host without CUDA it prints `no CUDA` and exits 0
(unless --quick: then the debug model, on CPU, goes through every figure a CPU can run:
bare, trainer, kernels, ckpt, and --float8's refusal).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The ~1B shape (Llama-3.2-1B: dim 2048, 16 layers, vocabulary 128256, tied) at 2 x 4096
# tokens per step; --quick: the debug model, a CPU's smallest.
GPU_SHAPE = ["--model_type", "llama_v3_1b", "--seq_len", "4096", "--train_batch_size", "2"]
QUICK_SHAPE = ["--model_type", "debug", "--seq_len", "32", "--train_batch_size", "1"]
# The checkpoint figure's model: small, its save and resume are what it measures.
GPU_CKPT_SHAPE = ["--model_type", "debug_large", "--seq_len", "512", "--train_batch_size", "4"]
# Timed steps after warm-up; the trainer logs every LOG_FREQ steps (its syncs are there).
GPU_STEPS, QUICK_STEPS = (5, 15), (1, 2)
LOG_FREQ = 5
# Linear warm-up longer than any run here: the LR of a step does not depend on
# max_steps, so a run cut short and resumed takes the same steps as an unbroken one.
FLAT_SCHEDULE = ["--warmup_steps", "1000"]
# What `python -m trainer` imports beyond torch; a host's python without one cannot
# run the trainer's figures (the env line names what is missing).
TRAINER_IMPORTS = (
    "numpy",
    "safetensors",
    "tokenizers",
    "jinja2",
    "yaml",
    "boto3",
    "datasets",
    "huggingface_hub",
    "transformers",
)


def say(figure: str, **fields: Any) -> None:
    def text(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.4g}"
        return json.dumps(value) if isinstance(value, str) and " " in value else str(value)

    print(
        f"gpu_bench {figure}: " + " ".join(f"{k}={text(v)}" for k, v in fields.items()), flush=True
    )


class Run:
    """The budget, the scratch directory and the figures that failed."""

    def __init__(self, args: argparse.Namespace, cuda: bool) -> None:
        self.args, self.cuda = args, cuda
        self.start = time.monotonic()
        self.failed: list[str] = []
        self.scratch = Path(tempfile.mkdtemp(prefix="gpu_bench."))
        self.shape = QUICK_SHAPE if args.quick else GPU_SHAPE
        self.warmup, self.steps = QUICK_STEPS if args.quick else GPU_STEPS
        self.env = dict(os.environ, PYTHONUNBUFFERED="1", TOKENIZERS_PARALLELISM="false")
        self.env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])
        )
        self.env["FSDP_EKS_CACHE_DIR"] = str(self.scratch / "cache")

    def left(self) -> float:
        return self.args.budget_s - (time.monotonic() - self.start)

    def fail(self, figure: str, **fields: Any) -> None:
        self.failed.append(figure)
        say(figure, verdict="FAIL", **fields)

    def python(
        self, args: list[str], want_s: float, env: dict | None = None
    ) -> tuple[int, str, str]:
        """`python ARGS` with the time this figure may take (the budget's rest at most)."""
        limit = max(1.0, min(want_s, self.left() - 5))
        try:
            done = subprocess.run(
                [sys.executable, *args],
                cwd=ROOT,
                env=env or self.env,
                capture_output=True,
                text=True,
                timeout=limit,
            )
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            return 124, out, f"timed out after {limit:.0f} s"
        return done.returncode, done.stdout, done.stderr

    def data(self) -> list[str]:
        """A text file long enough for this run's windows (the bundled corpus is small)."""
        path = self.scratch / "bench.txt"
        if not path.exists():
            words = ["the", "model", "shards", "its", "weights", "over", "every", "GPU", "and"]
            n = 64 * (4096 + 1) // 3
            path.write_text(" ".join(words[(i * 7 + i // 5) % len(words)] for i in range(n)))
        return ["--dataset", str(path), "--validation_freq", "0", "--validation_split", "0"]


def events(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


# --- the figures ------------------------------------------------------------------------


def feature_checks() -> dict[str, Any]:
    """What the trainer relies on, found by presence (torch 2.11 through the newest)."""
    import torch
    import torch.distributed.checkpoint as dcp

    found: dict[str, Any] = {
        "fully_shard": importlib.util.find_spec("torch.distributed.fsdp") is not None
        and hasattr(__import__("torch.distributed.fsdp", fromlist=["x"]), "fully_shard"),
        "fused_adamw": hasattr(torch, "_fused_adamw_"),
        "sync_debug_mode": hasattr(torch.cuda, "set_sync_debug_mode"),
        "dcp_async_save": hasattr(dcp, "async_save"),
        "torchao": importlib.util.find_spec("torchao") is not None,
    }
    missing = [name for name in TRAINER_IMPORTS if importlib.util.find_spec(name) is None]
    found["trainer_imports_missing"] = ",".join(missing) or "none"
    return found


def driver_version() -> str:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "unknown"
    done = subprocess.run(
        [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    )
    return (
        done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout else "unknown"
    )


def env_figure(run: Run) -> dict[str, Any]:
    import torch

    fields: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if run.cuda:
        props = torch.cuda.get_device_properties(0)
        fields |= {
            "gpu": props.name,
            "sm": f"{props.major}.{props.minor}",
            "mem_gib": round(props.total_memory / 2**30, 1),
            "gpus": torch.cuda.device_count(),
            "driver": driver_version(),
        }
    else:
        fields["device"] = "cpu"
    features = feature_checks()
    say("env", **fields, **features)
    return fields | features


def bare_figure(run: Run) -> dict | None:
    script = str(ROOT / "benchmarks" / "bare_fsdp2_loop.py")
    args = [script, "--impl", "ours", "--steps", str(run.steps), "--warmup", str(run.warmup)]
    code, out, err = run.python(args + run.shape, want_s=150)
    lines = events(out)
    if code != 0 or not lines:
        run.fail("bare", rc=code, error=err.strip().splitlines()[-1:] or "no output")
        return None
    line = lines[-1]
    say(
        "bare",
        device=line["device"],
        step_ms=line["step_s"] * 1e3,
        tokens_per_s_per_gpu=line["tokens_per_s_per_device"],
        mfu=line["mfu"],
        peak_mib=line["peak_mb"],
        reserved_mib=line.get("reserved_mb"),
    )
    return line


def trainer_run(run: Run, flags: list[str], want_s: float) -> tuple[int, list[dict], dict, str]:
    """The trainer in a child process with its counters (see `child`): (exit code, its
    event lines, the counters, the end of stderr)."""
    out_json = run.scratch / f"counters.{time.monotonic_ns()}.json"
    code, out, err = run.python([__file__, "--child", str(out_json), "--", *flags], want_s)
    counters = json.loads(out_json.read_text()) if out_json.exists() else {}
    return code, events(out), counters, "\n".join(err.strip().splitlines()[-3:])


def timing(lines: list[dict], warmup: int, total: int) -> dict[str, Any] | None:
    steps = {e["step"]: e for e in lines if e.get("event") == "step"}
    start = next((e for e in lines if e.get("event") == "start"), None)
    if start is None or warmup not in steps or total not in steps:
        return None
    step_s = (steps[total]["elapsed_s"] - steps[warmup]["elapsed_s"]) / (total - warmup)
    per_gpu = start["tokens_per_step"] / step_s / start["world_size"]
    last = steps[total]
    return {
        "step_s": step_s,
        "tokens_per_s_per_gpu": per_gpu,
        "mfu": last.get("mfu"),
        "mfu_fp8_peak": last.get("mfu_fp8_peak"),
        "loss": last["loss"],
        "peak_mib": max(e.get("mem_mb", 0) for e in steps.values()),
        "reserved_mib": max(e.get("mem_reserved_mb", 0) for e in steps.values()),
    }


def trainer_figures(run: Run, bare: dict | None) -> None:
    total = run.warmup + run.steps
    flags = [*run.shape, *run.data(), "--max_steps", str(total), "--log_freq", str(run.warmup)]
    code, lines, counters, err = trainer_run(run, flags, want_s=200)
    found = timing(lines, run.warmup, total)
    if code != 0 or found is None:
        run.fail("trainer", rc=code, error=err or "no step lines")
        if run.cuda and counters.get("sync_error"):
            run.fail("syncs", error=counters["sync_error"])
        return
    ratios = {}
    if bare is not None:
        ratios = {
            "step_ratio_vs_bare": found["step_s"] / bare["step_s"],
            "tokens_ratio_vs_bare": found["tokens_per_s_per_gpu"] / bare["tokens_per_s_per_device"],
        }
    say(
        "trainer",
        step_ms=found["step_s"] * 1e3,
        tokens_per_s_per_gpu=found["tokens_per_s_per_gpu"],
        mfu=found["mfu"],
        peak_mib=found["peak_mib"],
        reserved_mib=found["reserved_mib"],
        **ratios,
    )
    kernels = {
        "fused_ce_calls": counters.get("ce_calls", 0),
        "fused_adamw_calls": counters.get("fused_adamw_calls", 0),
        "optimizer_fused": counters.get("optimizer_fused"),
        "clip_as_grad_scale": counters.get("grad_scale_set"),
        "skip_as_found_inf": counters.get("found_inf_set"),
    }
    ce_ok = kernels["fused_ce_calls"] >= total
    gpu_ok = kernels["fused_adamw_calls"] >= total and all(
        kernels[k] for k in ("optimizer_fused", "clip_as_grad_scale", "skip_as_found_inf")
    )
    if ce_ok and (gpu_ok or not run.cuda):
        say("kernels", **kernels, verdict="ok" if run.cuda else "ok (CPU: foreach AdamW)")
    else:
        run.fail("kernels", **kernels)
    if not run.cuda:
        say("syncs", verdict="skipped (no CUDA)")
        return
    syncs = counters.get("log_step_syncs", 0)
    say(
        "syncs",
        non_log_step_syncs=0,
        mode_on_non_log_steps="error",
        log_step_syncs=syncs,
        where=counters.get("where", []),
        verdict="ok",
    )


def ckpt_figure(run: Run) -> None:
    """An unbroken run of 9 steps; a run that saves async at step 5 (not a log step) and
    ends at 6; its step-6 save removed, a resume from step 5 to 9. Steps 6-9 must match."""
    shape = QUICK_SHAPE if run.args.quick else GPU_CKPT_SHAPE
    base = [*shape, *run.data(), *FLAT_SCHEDULE]
    ckpt = run.scratch / "ckpt"
    code, unbroken, _, err = trainer_run(run, [*base, "--max_steps", "9", "--log_freq", "1"], 120)
    if code != 0:
        return run.fail("ckpt", stage="unbroken", rc=code, error=err)
    saving = [
        *base,
        "--checkpoint_dir",
        str(ckpt),
        "--async_save",
        "true",
        "--checkpoint_freq",
        "5",
    ]
    code, first, _, err = trainer_run(run, [*saving, "--max_steps", "6", "--log_freq", "4"], 120)
    if code != 0:
        return run.fail("ckpt", stage="save", rc=code, error=err)
    saved = {e["step"]: e for e in first if e.get("event") == "checkpoint_saved"}
    for path in ckpt.glob("*6"):  # the final (synchronous) save: resume from the async one
        shutil.rmtree(path)
    code, resumed, _, err = trainer_run(run, [*saving, "--max_steps", "9", "--log_freq", "1"], 120)
    if code != 0:
        return run.fail("ckpt", stage="resume", rc=code, error=err)
    loaded = [e["step"] for e in resumed if e.get("event") == "checkpoint_loaded"]
    want = {e["step"]: e["loss"] for e in unbroken if e.get("event") == "step"}
    got = {e["step"]: e["loss"] for e in resumed if e.get("event") == "step"}
    diff = max(
        (abs(got[s] - want[s]) / abs(want[s]) for s in range(6, 10) if s in got), default=math.inf
    )
    async_5 = saved.get(5, {}).get("async_save") is True
    fields = {
        "async_save_at_step_5": async_5,
        "blocked_ms": saved.get(5, {}).get("blocked_s", math.nan) * 1e3,
        "resumed_from": loaded,
        "loss_rel_diff_steps_6_9": diff,
    }
    # bf16 on a GPU is not bitwise repeatable (atomics in attention's backward): 1e-2.
    if async_5 and loaded == [5] and diff <= (1e-2 if run.cuda else 1e-5):
        say("ckpt", **fields, verdict="ok")
    else:
        run.fail("ckpt", **fields)


def fr_figure(run: Run) -> None:
    if not run.cuda:
        return say("fr_dump", verdict="skipped (no CUDA)")
    dumps = run.scratch / "fr"
    env = dict(run.env, TORCH_NCCL_ASYNC_ERROR_HANDLING="1")
    code, out, err = run.python([__file__, "--child_fr", str(dumps)], want_s=60, env=env)
    files = sorted(p.name for p in dumps.glob("*")) if dumps.exists() else []
    fields = {"rc": code, "dumps": files or "none"}
    if any(name.endswith("0") for name in files):
        say("fr_dump", **fields, verdict="ok")
    else:
        run.fail("fr_dump", **fields, error=err.strip().splitlines()[-1:] or "")


def float8_figure(run: Run, env: dict[str, Any]) -> None:
    from trainer import float8

    capability = tuple(int(x) for x in env["sm"].split(".")) if run.cuda else None
    reason = float8.refusal("cuda" if run.cuda else "cpu", capability)  # type: ignore[arg-type]
    total = run.warmup + run.steps
    flags = [*run.shape, *run.data(), "--max_steps", str(total), "--log_freq", str(run.warmup)]
    if reason is not None:  # the trainer must refuse it, at start, with that reason
        code, lines, _, err = trainer_run(run, [*flags, "--float8", "true"], want_s=60)
        said = next((e["message"] for e in lines if e.get("event") == "error"), err)
        if code == 2 and "SM 8.9+" in said:
            return say("float8", verdict="skipped (refused, as it must be here)", reason=said)
        return run.fail("float8", rc=code, said=said)
    if not env.get("torchao"):
        return say("float8", verdict="skipped (torchao not importable: pip install torchao)")
    found = {}
    for name, extra in (("bf16", []), ("float8", ["--float8", "true"])):
        code, lines, _, err = trainer_run(run, [*flags, "--compile", "true", *extra], want_s=180)
        found[name] = timing(lines, run.warmup, total) if code == 0 else None
        if found[name] is None:
            return run.fail("float8", run=name, rc=code, error=err)
    b, f = found["bf16"], found["float8"]
    say(
        "float8",
        bf16_tokens_per_s_per_gpu=b["tokens_per_s_per_gpu"],
        float8_tokens_per_s_per_gpu=f["tokens_per_s_per_gpu"],
        speedup=f["tokens_per_s_per_gpu"] / b["tokens_per_s_per_gpu"],
        bf16_mfu=b["mfu"],
        float8_mfu_bf16_peak=f["mfu"],
        float8_mfu_fp8_peak=f["mfu_fp8_peak"],
        bf16_last_loss=b["loss"],
        float8_last_loss=f["loss"],
        float8_peak_mib=f["peak_mib"],
        bf16_peak_mib=b["peak_mib"],
    )


# --- the child processes ------------------------------------------------------------------


def child(out_json: str, argv: list[str]) -> int:
    """`python -m trainer ARGV` with counters: calls of the chunked head's autograd
    Function and of torch's fused AdamW, the optimizer's flags; on CUDA, host syncs made
    errors on non-log steps (after 2 of warm-up) and counted on log steps."""
    import warnings

    import torch

    from trainer import loss
    from trainer import train as t
    from trainer.loop import Progress

    state: dict[str, Any] = {
        "ce_calls": 0,
        "fused_adamw_calls": 0,
        "log_step_syncs": 0,
        "where": [],
        "sync_error": None,
    }
    chunked = loss.ChunkedLinearCrossEntropy.forward

    def counted_ce(*args: Any, **kwargs: Any) -> Any:
        state["ce_calls"] += 1
        return chunked(*args, **kwargs)

    loss.ChunkedLinearCrossEntropy.forward = staticmethod(counted_ce)
    if hasattr(torch, "_fused_adamw_"):
        fused = getattr(torch, "_fused_adamw_")  # noqa: B009 (not in torch's exports)

        def counted_adamw(*args: Any, **kwargs: Any) -> Any:
            state["fused_adamw_calls"] += 1
            return fused(*args, **kwargs)

        torch._fused_adamw_ = counted_adamw  # type: ignore[attr-defined]
    built = t.build_optimizer
    optimizers: list[torch.optim.Optimizer] = []

    def build_optimizer(*args: Any, **kwargs: Any) -> Any:
        optimizers.append(built(*args, **kwargs))
        return optimizers[-1]

    t.build_optimizer = build_optimizer
    step = t.TrainLoop.step
    progress = Progress(first_step=1, start=0.0)  # what needs_values reads: a fresh run

    def step_with_modes(loop: Any, n: int) -> Any:
        if torch.cuda.is_available() and n >= 3:  # after warm-up: lazy init, first gathers
            reads = loop.needs_values(n, progress)  # a step whose values are read at once
            torch.cuda.set_sync_debug_mode("warn" if reads else "error")
        return step(loop, n)

    t.TrainLoop.step = step_with_modes  # type: ignore[method-assign]

    def show(message: Any, category: Any, filename: str, lineno: int, *rest: Any) -> None:
        if "synchroniz" in str(message):
            state["log_step_syncs"] += 1
            state["where"] = (state["where"] + [f"{Path(filename).name}:{lineno}"])[-3:]

    warnings.showwarning = show
    warnings.simplefilter("always")
    try:
        code = t.main(argv)
    except RuntimeError as exc:
        if "synchroniz" in str(exc):
            state["sync_error"] = str(exc).splitlines()[0][:200]
        code = 1
    finally:
        if torch.cuda.is_available():
            torch.cuda.set_sync_debug_mode(0)
        opt = optimizers[-1] if optimizers else None
        state |= {
            "optimizer_fused": bool(opt and opt.defaults.get("fused")),
            "grad_scale_set": isinstance(getattr(opt, "grad_scale", None), torch.Tensor),
            "found_inf_set": isinstance(getattr(opt, "found_inf", None), torch.Tensor),
        }
        Path(out_json).write_text(json.dumps(state))
    return code


def child_fr(dump_dir: str) -> int:
    """A collective that never finishes in time: the watchdog times out and dumps."""
    import datetime

    import torch
    import torch.distributed as dist

    from trainer import device as devices

    os.environ.update(devices.flight_recorder_env(dump_dir, dict(os.environ)))
    Path(dump_dir).mkdir(parents=True, exist_ok=True)
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    dist.init_process_group(
        "nccl",
        store=dist.HashStore(),
        rank=0,
        world_size=1,
        device_id=dev,
        timeout=datetime.timedelta(seconds=5),
    )
    x = torch.ones(1024, device=dev)
    dist.all_reduce(x)
    torch.cuda.synchronize()
    torch.cuda._sleep(int(4e10))  # tens of seconds of GPU time ahead of the next collective
    dist.all_reduce(x)
    time.sleep(40)  # the watchdog aborts the process before this ends
    return 3


# --- main -----------------------------------------------------------------------------


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the debug model, fewest steps; on CPU the figures a CPU can run",
    )
    parser.add_argument(
        "--budget_s",
        type=float,
        default=470.0,
        help="seconds for all figures; a figure short of time is cut",
    )
    parser.add_argument("--skip", default="", help="figures to leave out, comma-separated")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child_fr", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args(argv)
    args.trainer_argv = rest[1:] if rest[:1] == ["--"] else rest
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        return child(args.child, args.trainer_argv)
    if args.child_fr:
        return child_fr(args.child_fr)
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not args.quick:
        say("env", torch=torch.__version__, device="cpu")
        print(
            "gpu_bench: no CUDA (this torch sees no GPU): nothing measured; "
            "--quick runs the pieces a CPU can",
            flush=True,
        )
        return 0
    run = Run(args, cuda)
    skip = set(filter(None, args.skip.split(",")))
    try:
        env = env_figure(run)
        bare = bare_figure(run) if "bare" not in skip else None
        if "trainer" not in skip:
            trainer_figures(run, bare)
        if "ckpt" not in skip:
            ckpt_figure(run)
        if "fr_dump" not in skip:
            fr_figure(run)
        if "float8" not in skip:
            float8_figure(run, env)
    finally:
        shutil.rmtree(run.scratch, ignore_errors=True)
    say("done", seconds=round(time.monotonic() - run.start), failed=",".join(run.failed) or "none")
    return 1 if run.failed else 0


if __name__ == "__main__":
    sys.exit(main())
