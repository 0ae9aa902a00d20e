"""A snapshot file nested past the doctor's bound is refused before the streaming parser
holds it: the parser makes a path string per level for every event of a read, so 100,000
levels held 10-20 GB (an xdist worker OOM-killed in a suite run beside another) before
the depth bound could refuse the file."""

from __future__ import annotations

import tracemalloc

import pytest

from skills.job_doctor.snapshot_file import read_snapshot
from skills.shared.errors import ToolFailure

DEEP = {
    "an array 100,000 deep": "[" * 100_000 + "]" * 100_000,
    "a map 100,000 deep": '{"a":' * 100_000 + "1" + "}" * 100_000,
    "a snapshot whose job is 100,000 deep": '{"job": ' + "[" * 100_000 + "]" * 100_000 + "}",
}


@pytest.mark.parametrize("name", list(DEEP))
def test_a_deep_file_is_refused_holding_a_few_mib(tmp_path, name):
    path = tmp_path / "deep.json"
    path.write_text(DEEP[name])
    tracemalloc.start()
    try:
        with pytest.raises(ToolFailure) as refused:
            read_snapshot(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert refused.value.code == "snapshot_invalid" and "deeper" in refused.value.message
    assert peak < 64 * 2**20, f"{peak / 2**20:.0f} MiB"
