"""benchmarks/gpu_bench.py, the GPU benchmark a GPU host runs with its own python: on a
host without CUDA it imports, parses its arguments and says `no CUDA` (exit 0, nothing
measured); its quick mode runs every figure a CPU can run (bare loop, trainer, the
kernels' counters, an async save and resume, --float8's refusal) to its lines."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.benchmark_runs import run_quick

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_bench.py"
CPU_ONLY = {"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"}


def test_without_cuda_it_says_so_and_measures_nothing():
    done = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                          cwd=ROOT, env=CPU_ONLY, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "gpu_bench: no CUDA" in done.stdout
    assert "gpu_bench bare" not in done.stdout


def test_its_arguments_parse_and_the_trainers_flags_pass_through():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu_bench
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    args = gpu_bench.parse(["--quick", "--budget_s", "60", "--skip", "float8"])
    assert (args.quick, args.budget_s, args.skip) == (True, 60.0, "float8")
    child = gpu_bench.parse(["--child", "out.json", "--", "--model_type", "debug"])
    assert child.child == "out.json" and child.trainer_argv == ["--model_type", "debug"]


NUMBER = r"[\d.e+-]+"
QUICK_LINES = (
    r"^gpu_bench env: .* fused_adamw=True .* trainer_imports_missing=none",
    rf"^gpu_bench bare: device=cpu step_ms={NUMBER}",
    rf"^gpu_bench trainer: step_ms={NUMBER} .* tokens_ratio_vs_bare={NUMBER}",
    r"^gpu_bench kernels: fused_ce_calls=\d+ .* verdict=",
    r"^gpu_bench ckpt: async_save_at_step_5=True .* resumed_from=\[5\] .* verdict=ok",
    r'^gpu_bench float8: verdict="skipped \(refused, as it must be here\)"',
    r"^gpu_bench done: seconds=\d+ failed=none",
)


@pytest.mark.integration
def test_its_quick_mode_runs_every_figure_a_cpu_can_run():
    out = run_quick("gpu_bench")
    missing = [line for line in QUICK_LINES if not re.search(line, out, re.MULTILINE)]
    assert not missing, (missing, out)
