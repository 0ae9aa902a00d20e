"""A finished local job's run directory copied under another name: tests about records
and lists start from one real ended job instead of training another."""

from __future__ import annotations

import json
import shutil
from pathlib import Path


def copy_of(ended_run: Path, runs: Path, job_name: str) -> Path:
    """The ended job's run directory as `runs/job_name`, its record renamed to match."""
    copy = runs / job_name
    shutil.copytree(ended_run, copy)
    record = json.loads((copy / "job.json").read_text())
    (copy / "job.json").write_text(json.dumps({**record, "job_name": job_name}))
    return copy
