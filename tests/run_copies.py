"""One finished local job per test session (the `ended_job` fixture in tests/conftest.py)
and its run directory copied under another name: tests about records, lists, logs and
checkpoints start from that one real ended job instead of training another (each job is
three Python processes, two of them torch starts: about 10 CPU-seconds, issue 36)."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from commands.deploy_training_job import DeployResult

# The checkpoint directory's owner marker (targets/checkpoint_owner.py): a copy owns its own.
OWNER_FILE = ".fsdp-eks-owner"
STEPS = 2


@dataclass(frozen=True)
class EndedJob:
    """`run` is shared by every test of a worker: read it, or copy it (copy_of) to
    change it. `inherited_tmp` is the TMPDIR the job was started with (left empty by it);
    `state` is its deploy result."""

    run: Path
    inherited_tmp: Path
    state: DeployResult


def end_a_job(base: Path) -> EndedJob:
    """A 1-rank, STEPS-step job run to its end under `base`, made the way the tests that
    share it need: a checkpoint every step, none pruned (step-1 and step-2, for the
    damaged-checkpoint test); started over a record that is not JSON with
    replace_corrupt_record (the test of that flag); with a private TMPDIR (the test that
    no job leaves files in the temp dir it inherits: the global /tmp races other
    workers' torchrun, which make torchelastic_* there at the same time)."""
    import pytest

    from commands.deploy_training_job import deploy_training_job

    runs, inherited = base / "runs", base / "inherited-tmp"
    inherited.mkdir(parents=True)
    (runs / "ended").mkdir(parents=True)
    (runs / "ended" / "job.json").write_text("{not json")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(inherited))
        state = deploy_training_job(
            job_name="ended", runs_dir=str(runs), max_steps=STEPS, gpu_per_node=1,
            checkpoint_freq=1, keep_last=0, replace_corrupt_record=True,
        )  # fmt: skip
    assert state.status == "succeeded", state.log_tail
    return EndedJob(run=runs / "ended", inherited_tmp=inherited, state=state)


def copy_of(ended_run: Path, runs: Path, job_name: str, *, checkpoints: bool = True) -> Path:
    """The ended job's run directory as `runs/job_name`, its record renamed to match and
    its checkpoints (unless left out) owned by the copy, as a job of that name would own
    them."""
    copy = runs / job_name
    ignore = None if checkpoints else shutil.ignore_patterns("checkpoints")
    shutil.copytree(ended_run, copy, ignore=ignore)
    record = json.loads((copy / "job.json").read_text())
    (copy / "job.json").write_text(json.dumps({**record, "job_name": job_name}))
    if (owner := copy / "checkpoints" / OWNER_FILE).exists():
        owner.write_text(str(copy.resolve()))
    return copy
