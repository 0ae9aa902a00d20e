"""A benchmark's quick mode, run as its own process: the tests that keep benchmarks from
rotting unseen call it (each benchmark takes `--quick`: its cheapest run through the same
code paths, to the same ratio lines; a proof that it runs, not a measurement)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_quick(name: str, *args: str, timeout: float = 600) -> str:
    """benchmarks/<name>.py --quick [args]; its stdout (a failure shows the end of stderr)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), "--quick", *args],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
