"""The operations index (issue 49 item 1): a status filter reads what the index says may
match, not every record; the index is derived (made from the records on first use, made
again when corrupt, never by a read-only server) and safe under concurrent writers."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
import tracemalloc
from datetime import datetime, timezone
from pathlib import Path

import pytest

from skills.operations import operations
from skills.operations.operation_state import OperationRecord, OperationStatus
from skills.operations.record_store import RecordFile
from skills.shared.write_gate import closed_to_writes

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(operations.STATE_DIR_ENV, str(tmp_path / "state"))
    return tmp_path / "state"


def _record(created: float, status: OperationStatus = "succeeded", suffix: int = 0) -> str:
    """An operation written as a version without the index wrote it: no row noted."""
    stamp = datetime.fromtimestamp(created, timezone.utc).strftime("%Y%m%d-%H%M%S")
    op_id = f"build_image-{stamp}-{suffix:06x}"
    folder = operations.operations_dir() / op_id
    folder.mkdir(parents=True, exist_ok=True)
    RecordFile(folder / operations.RECORD, OperationRecord).write(OperationRecord(
        operation_id=op_id, tool="build_image", entry="m:f", arguments={}, cwd="/",
        status=status, created_at=created, updated_at=created,
        ended_at=None if status == "running" else created,
    ))  # fmt: skip
    return op_id


def _seed(count: int, status: OperationStatus = "succeeded") -> list[str]:
    now = time.time() - 3600
    return [_record(now - i * 60, status, suffix=i) for i in range(count)]


def _count_record_reads(monkeypatch) -> list[Path]:
    reads: list[Path] = []
    real = RecordFile.read

    def counted(self):
        reads.append(self.path)
        return real(self)

    monkeypatch.setattr(RecordFile, "read", counted)
    return reads


def _rows(state_dir: Path) -> dict[str, str | None]:
    with sqlite3.connect(state_dir / "operations" / operations.INDEX) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        return dict(conn.execute("SELECT name, status FROM records"))


def test_grouping_by_second_scans_each_name_once_not_the_rest_per_second(monkeypatch):
    # 400 operations, each in a second of its own: the rest of the names was scanned for
    # each second (80,000 look-ups at 400, 32 million at 8,000)
    _seed(400)
    stamps = 0
    real = operations._stamp

    def counted(name: str) -> str:
        nonlocal stamps
        stamps += 1
        return real(name)

    monkeypatch.setattr(operations, "_stamp", counted)
    assert operations.list_records(status="failed") == []
    assert stamps <= 3 * 400


@pytest.mark.parametrize("listing", ["list_records", "page_records"])
def test_a_status_that_matches_nothing_reads_no_record_once_the_records_are_indexed(
    monkeypatch, state_dir, listing
):
    _seed(300)
    failed = _record(time.time() - 30, "failed", suffix=0xFFF)

    def listed() -> list[str]:
        if listing == "list_records":
            found = operations.list_records(status="failed", limit=20)
        else:
            found = operations.page_records(None, "failed", 20, None).items
        return [r.operation_id for r in found]

    reads = _count_record_reads(monkeypatch)
    assert listed() == [failed]  # first use: the records written without the index migrate
    assert len(reads) == 301 + 1  # each once, and the one found again (as get reads it)
    reads.clear()
    assert listed() == [failed]
    assert reads == [operations._file(failed).path]  # only what may match
    reads.clear()
    assert operations.page_records(None, "cancelled", 20, None).items == []
    assert reads == []


def test_a_record_changed_behind_the_index_is_read_again(monkeypatch):
    ids = _seed(50)
    assert operations.page_records(None, "failed", 20, None).items == []
    # rewritten by a writer that does not note it (an older version of the suite)
    file = operations._file(ids[7])
    file.write(file.read().model_copy(update={"status": "failed"}))  # type: ignore[union-attr]
    reads = _count_record_reads(monkeypatch)
    found = operations.page_records(None, "failed", 20, None).items
    assert [r.operation_id for r in found] == [ids[7]]
    assert len(reads) == 2  # the changed one, synced, then read as the page's


def test_removed_records_leave_the_index_and_a_corrupt_index_is_made_again(state_dir):
    ids = _seed(20, "failed")
    assert len(operations.page_records(None, "failed", 50, None).items) == 20
    for op_id in ids[:5]:
        for f in (state_dir / "operations" / op_id).iterdir():
            f.unlink()
        (state_dir / "operations" / op_id).rmdir()
    assert len(operations.page_records(None, "failed", 50, None).items) == 15
    assert set(_rows(state_dir)) == set(ids[5:])
    (state_dir / "operations" / operations.INDEX).write_bytes(b"not a database" * 512)
    for suffix in ("-wal", "-shm"):
        Path(f"{state_dir / 'operations' / operations.INDEX}{suffix}").unlink(missing_ok=True)
    found = operations.page_records(None, "failed", 50, None).items
    assert [r.operation_id for r in found] == ids[5:]
    assert _rows(state_dir) == dict.fromkeys(ids[5:], "failed")


def test_a_read_only_server_lists_from_the_records_and_writes_no_index(state_dir):
    ids = _seed(10)
    failed = _record(time.time() - 10, "failed", suffix=0xAB)
    index = state_dir / "operations" / operations.INDEX
    with closed_to_writes():
        found = operations.page_records(None, "failed", 20, None).items
        assert [r.operation_id for r in found] == [failed]
        assert not index.exists()
    operations.page_records(None, "failed", 20, None)  # a server that may write makes it
    before = {p.name: p.stat().st_mtime_ns for p in index.parent.glob(f"{operations.INDEX}*")}
    file = operations._file(ids[0])  # now failed, written without the index
    file.write(file.read().model_copy(update={"status": "failed"}))  # type: ignore[union-attr]
    with closed_to_writes():
        found = operations.page_records(None, "failed", 20, None).items
        assert [r.operation_id for r in found] == [failed, ids[0]]
    after = {p.name: p.stat().st_mtime_ns for p in index.parent.glob(f"{operations.INDEX}*")}
    assert after == before


WRITER = """
import sys
from skills.operations import operations
from skills.operations.operation_state import OperationProgress
for op_id in sys.argv[1:]:
    for step in range(15):
        operations._update(op_id, progress=OperationProgress(completed=step))
    operations._update(op_id, status="failed")
"""


def test_two_processes_updating_records_keep_the_index_whole_and_true(state_dir):
    ids = _seed(16, "running")
    operations.page_records(None, "failed", 20, None)  # the index exists, all running
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, *ids[i::2]], cwd=ROOT) for i in range(2)
    ]
    for writer in writers:
        assert writer.wait(timeout=120) == 0
    # every write noted under its record's lock: the index says what the records say
    assert _rows(state_dir) == dict.fromkeys(ids, "failed")
    found = operations.page_records(None, "failed", 20, None).items
    assert [r.operation_id for r in found] == ids


def test_a_status_matching_none_takes_the_same_memory_at_16x_the_operations():
    """The listing is synced one folder at a time and only the operations that may match
    are held (on main: every folder's name, sorted, and a set of them: 0.2 MiB more at
    1,024 operations than at 64)."""
    peaks = []
    for count in (64, 1024):
        _seed(count)  # 64, then 1,024 more
        operations.page_records(None, "failed", 20, None)  # migrated: each read once
        tracemalloc.start()
        try:
            page = operations.page_records(None, "failed", 20, None)
            peaks.append(tracemalloc.get_traced_memory()[1] / 2**20)
        finally:
            tracemalloc.stop()
        assert (page.items, page.more) == ([], 0)
    assert peaks[1] < peaks[0] + 0.06, peaks
