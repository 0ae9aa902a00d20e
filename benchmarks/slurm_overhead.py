"""The scheduler's overhead: time from the CLI call (`deploy_training_job.py --target X`)
to the first training step in the job's log, on a one-node Slurm (the test stack's:
munge + slurmctld + slurmd, private paths) against the local target, in the same run
on the same machine, alternating. Same job both ways: 2 CPU processes (gloo), 4 steps
(--quick: 1 process, 1 step).
Prints each target's median and the ratio; Slurm adds sbatch, the scheduler's pick,
slurmd's launch of the batch script and srun's of the step.

`--slurm-in-env` (the test suite passes it, with its session's one-node cluster in
SLURM_CONF): submit to the Slurm the clients' standard environment names instead of
starting one (munged, slurmctld, slurmd: about a second of wall, a cluster fewer), and scancel
this run's jobs when done. `make bench` starts its own, as before."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from skills.training_job_deployer.trainer_log import parse_events  # noqa: E402
from tests.services.slurm import slurm_cluster  # noqa: E402

QUICK = "--quick" in sys.argv  # one round of 1 step on 1 process (the test suite runs it)
ROUNDS = 1 if QUICK else 3
STEPS = 1 if QUICK else 4
PROCESSES = 1 if QUICK else 2
IN_ENV = "--slurm-in-env" in sys.argv  # see the docstring


def first_step(target: str, runs: Path, job: str) -> tuple[float, float]:
    """(seconds from the CLI call to the first step line, seconds to the CLI's exit)."""
    start = time.perf_counter()
    cli = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "commands" / "deploy_training_job.py"),
            "--target",
            target,
            "--job_name",
            job,
            "--runs_dir",
            str(runs),
            "--max_steps",
            str(STEPS),
            "--gpu_per_node",
            str(PROCESSES),
            "--json",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
    )
    stepped = None
    while stepped is None:
        for log in (runs / job / "logs").glob("*.log"):
            text = log.read_text(errors="replace")
            if any(e["event"] == "step" for e in parse_events(text)):
                stepped = time.perf_counter() - start
        if stepped is None:
            if cli.poll() is not None:
                raise RuntimeError(f"{target}: the CLI exited {cli.returncode} before a step")
            time.sleep(0.02)
    if cli.wait(timeout=300) != 0:
        raise RuntimeError(f"{target}: the CLI exited {cli.returncode}")
    return stepped, time.perf_counter() - start


@contextlib.contextmanager
def a_cluster(prefix: str) -> Iterator[None]:
    """The Slurm this run submits to, in the environment until the block exits."""
    if not IN_ENV:
        with slurm_cluster() as cluster:  # its exit cancels every job
            os.environ.update(cluster.env)
            yield
        return
    if not os.environ.get("SLURM_CONF"):
        sys.exit("--slurm-in-env: SLURM_CONF names no cluster")
    try:
        yield
    finally:  # a shared cluster: free its node of this run's jobs (job names are ours)
        names = ",".join(f"{prefix}slurm-{i}" for i in range(ROUNDS))
        subprocess.run(["scancel", f"--name={names}"], capture_output=True, timeout=30,
                       check=False)  # fmt: skip


def main() -> None:
    runs = Path(tempfile.mkdtemp(prefix="slurm-bench-"))
    times: dict[str, list[tuple[float, float]]] = {"local": [], "slurm": []}
    prefix = f"b{secrets.token_hex(3)}-" if IN_ENV else ""  # unique on a shared cluster
    try:
        with a_cluster(prefix):
            for i in range(ROUNDS):
                for target in times:
                    times[target].append(first_step(target, runs, f"{prefix}{target}-{i}"))
    finally:
        shutil.rmtree(runs, ignore_errors=True)
    medians = {}
    for target, runs_ in times.items():
        step = statistics.median(t for t, _ in runs_)
        total = statistics.median(t for _, t in runs_)
        medians[target] = step
        each = ", ".join(f"{t:.1f}" for t, _ in runs_)
        print(
            f"{target:5}: CLI call -> first step {step:5.1f} s (median of {each}); "
            f"to exit {total:5.1f} s"
        )
    extra = medians["slurm"] - medians["local"]
    print(
        f"slurm / local: {medians['slurm'] / medians['local']:.2f}x "
        f"({extra:+.1f} s for sbatch, scheduling and srun)"
    )


if __name__ == "__main__":
    main()
