"""The holdout: ten snapshots written after the pod doctor was done, not used to tune it
(tests/fixtures/pod_doctor/holdout/). Scored on the root finding's code, pod and node
rank. 9 of 10 at the time of writing; the miss is kept as a strict xfail so a fix shows
up, and nothing is tuned to make it pass silently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skills.job_doctor.diagnose import diagnose

HOLDOUT = Path(__file__).parents[1] / "fixtures" / "pod_doctor" / "holdout"
EXPECTED: dict[str, dict] = json.loads((HOLDOUT / "expected.json").read_text())

# Misses, with what the doctor says instead (the honest score).
MISSES = {
    # Autograd anomaly mode's wording ("returned nan values in its 0th output") is not in
    # the nan_loss row: it comes out as a generic python_error.
    "07_anomaly_nan": "python_error",
}


def test_the_holdout_is_ten_snapshots():
    assert len(EXPECTED) == 10
    assert {p.stem for p in HOLDOUT.glob("*.json")} - {"expected"} == set(EXPECTED)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=f"diagnosed {MISSES[n]}"))
        if n in MISSES
        else n
        for n in sorted(EXPECTED)
    ],
)
def test_holdout_root_finding(name):
    expected = EXPECTED[name]
    root = diagnose(json.loads((HOLDOUT / f"{name}.json").read_text())).root
    assert root is not None
    assert (root.code, root.pod, root.rank) == (
        expected["code"],
        expected["pod"],
        expected["rank"],
    )
