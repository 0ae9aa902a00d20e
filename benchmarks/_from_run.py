"""`--from-run DIR`: the benchmarks that list or read a finished local job take a copy of
DIR, a finished local job's run directory, instead of training one first. The test suite
passes the ended job its other tests share: a job is two torch starts, and only its record
and log matter to these benchmarks."""

from __future__ import annotations

import sys
from pathlib import Path

FROM_RUN = Path(sys.argv[sys.argv.index("--from-run") + 1]) if "--from-run" in sys.argv else None


def finished_job(runs: Path, name: str, steps: int, processes: int) -> None:
    """runs/name, a finished local job: a copy of --from-run's (its checkpoints left out),
    else one trained here with `steps` steps on `processes` processes."""
    if FROM_RUN:
        from tests.run_copies import copy_of

        copy_of(FROM_RUN, runs, name, checkpoints=False)
        return
    from commands.deploy_training_job import deploy_training_job

    deploy_training_job(job_name=name, runs_dir=str(runs), max_steps=steps,
                        gpu_per_node=processes)  # fmt: skip
