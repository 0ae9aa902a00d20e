"""Wall time of the demo job (what `make demo` runs, packages already installed) and
its tokens/s. Baseline in the same run: a 2-process torchrun of a script that only
imports torch and joins the process group, i.e. the launch cost no trainer can avoid.
Goal: the demo under 3 minutes on the 2-core dev machine."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._launch import launcher  # noqa: E402

# --quick (the test suite runs it, to prove the benchmark runs, not to measure): the
# demo job for 1 step on 1 process (each rank is a torch start), the baseline on 1 too,
# without torchrun (a world of one: torchrun is a torch start of its own).
QUICK = "--quick" in sys.argv
PROCESSES = 1 if QUICK else 2

BARE = (
    "import os\n"
    "import torch.distributed as dist\n"
    "if 'WORLD_SIZE' in os.environ:\n"
    "    dist.init_process_group('gloo')\n"
    "else:  # no launcher (--quick): a world of one\n"
    "    dist.init_process_group('gloo', store=dist.HashStore(), rank=0, world_size=1)\n"
    "dist.barrier()\n"
    "dist.destroy_process_group()\n"
)


def main() -> None:
    runs = Path(tempfile.mkdtemp(prefix="demo-bench-"))
    try:
        script = runs / "bare.py"
        script.write_text(BARE)
        start = time.perf_counter()
        subprocess.run([*launcher(PROCESSES, QUICK), str(script)], check=True,
                       capture_output=True)  # fmt: skip
        bare = time.perf_counter() - start

        start = time.perf_counter()
        done = subprocess.run(
            [
                sys.executable,
                str(ROOT / "commands" / "deploy_training_job.py"),
                "--target",
                "local",
                "--job_name",
                "demo",
                "--runs_dir",
                str(runs),
                "--json",
                *(["--max_steps", "1", "--gpu_per_node", "1"] if QUICK else []),
            ],
            check=True,
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        demo = time.perf_counter() - start
        result = json.loads(done.stdout)
    finally:
        shutil.rmtree(runs, ignore_errors=True)

    launch = "python" if QUICK else "torchrun"
    print(f"{launch} {PROCESSES} procs, init+barrier only (baseline): {bare:7.1f} s")
    print(
        f"demo job end to end                           : {demo:7.1f} s  "
        f"({demo / bare:4.1f}x baseline)"
    )
    print(
        f"demo steps {result['steps']}, loss {result['first_loss']:.3f} -> "
        f"{result['last_loss']:.3f}, {result['tokens_per_s']:,.0f} tokens/s, "
        f"status {result['status']}"
    )
    print(f"goal < 180 s                                  : {'met' if demo < 180 else 'NOT met'}")


if __name__ == "__main__":
    main()
