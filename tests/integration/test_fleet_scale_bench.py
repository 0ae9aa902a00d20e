"""benchmarks/fleet_scale.py in its quick mode (the smallest size of each item), so it
cannot rot unseen; its rows say what the items promise at that size."""

from __future__ import annotations

import pytest

from tests.benchmark_runs import run_quick
from tests.run_copies import EndedJob

pytestmark = pytest.mark.integration


def _rows(out: str, title: str) -> list[list[str]]:
    block = out.split(title, 1)[1].split("\n\n", 1)[0]
    return [[c.strip() for c in line.split("|")] for line in block.splitlines()[2:] if line]


def test_the_fleet_scale_benchmark_runs_in_its_quick_mode(ended_job: EndedJob):
    # The local job listed is the ended job the session's other tests share (2 steps).
    out = run_quick("fleet_scale", "--from-run", str(ended_job.run))
    (events,) = _rows(out, "events of one job")
    assert events[:3] == ["200", "2", "3"] and events[4:6] == ["3", "3"]  # LISTs, objects
    (jobs,) = _rows(out, "list_training_jobs (local")
    assert jobs[0] == "10" and int(jobs[3]) < 40_000
    (ops,) = _rows(out, "list_operations")
    assert ops[:2] == ["100", "20"] and ops[3] == "20"  # the first and the last page: 20 each
    (servers,) = _rows(out, "list_model_servers")
    assert servers[:2] == ["20", "2"]
