"""RecordFile: read-modify-write under the lock from several processes loses no
update; unreadable records say why; writes leave no temp files."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest
from pydantic import BaseModel

from skills.operations.record_store import RecordCorrupt, RecordFile


class Counter(BaseModel):
    count: int = 0


def _bump(path: str, times: int) -> None:
    file = RecordFile(Path(path), Counter)
    for _ in range(times):
        file.update(lambda r: Counter(count=(r.count if r else 0) + 1))


def test_updates_from_several_processes_are_never_lost(tmp_path):
    path = tmp_path / "counter.json"
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_bump, args=(str(path), 50)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert RecordFile(path, Counter).read() == Counter(count=200)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["counter.json", "counter.lock"]


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("", "it is empty"),
        ("{not json", "Invalid JSON"),
        ('{"count": "many"}', "count: Input should be a valid integer"),
        ("[1, 2]", "Input should be an object"),
    ],
)
def test_an_unreadable_record_says_why(tmp_path, content, reason):
    path = tmp_path / "r.json"
    path.write_text(content)
    with pytest.raises(RecordCorrupt) as caught:
        RecordFile(path, Counter).read()
    assert reason in caught.value.reason and caught.value.path == path


def test_a_directory_in_the_records_place_is_corrupt_not_a_crash(tmp_path):
    (tmp_path / "r.json").mkdir()
    with pytest.raises(RecordCorrupt, match="directory"):
        RecordFile(tmp_path / "r.json", Counter).read()


def test_no_record_reads_as_none(tmp_path):
    assert RecordFile(tmp_path / "none.json", Counter).read() is None
