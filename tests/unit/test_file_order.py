"""tests/file_order.py: whole files, longest first, so the xdist workers finish together."""

from __future__ import annotations

import pytest

from tests.file_order import ESTIMATED_SECONDS, longest_first

IDS = ["a.py::t1", "a.py::t2", "b.py::t1", "c.py::t1", "c.py::t2", "c.py::t3"]


@pytest.mark.parametrize(
    ("timed", "files"),
    [
        ({}, ["a.py", "b.py", "c.py"]),  # nothing known: as collected
        ({"b.py": 90, "a.py": 2, "c.py": 30}, ["b.py", "c.py", "a.py"]),
        ({"c.py": 5}, ["c.py", "a.py", "b.py"]),  # untimed files weigh nothing
        ({"a.py": 1, "b.py": 1, "c.py": 1}, ["a.py", "b.py", "c.py"]),  # ties: as collected
    ],
)
def test_files_are_ordered_by_their_seconds_and_stay_whole(timed, files):
    order = [IDS[i] for i in longest_first(IDS, timed)]
    assert sorted(order) == sorted(IDS)
    assert [n.split("::")[0] for n in order] == [f for f in files for n in IDS if n.startswith(f)]
    # Within a file, the collected order.
    assert [n for n in order if n.startswith("c.py")] == ["c.py::t1", "c.py::t2", "c.py::t3"]


def test_without_timings_the_estimates_put_the_image_build_first():
    heavy = max(ESTIMATED_SECONDS, key=ESTIMATED_SECONDS.__getitem__)
    ids = ["tests/unit/test_x.py::t", f"{heavy}::t", "tests/unit/test_y.py::t"]
    assert [ids[i] for i in longest_first(ids, {})][0] == f"{heavy}::t"
    # A time measured here wins over the estimate.
    assert longest_first(ids, {heavy: 0.1, "tests/unit/test_y.py": 5})[0] == 2


def test_every_estimated_file_exists():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    assert [path for path in ESTIMATED_SECONDS if not (root / path).is_file()] == []
