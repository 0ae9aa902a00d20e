"""The operations history (issue 35 item 4): read newest first only as far as asked, and
pruned by age and count when an operation starts; a running operation is never pruned."""

from __future__ import annotations

import time
from datetime import datetime, timezone

import pytest

from skills.operations import operations
from skills.operations.operation_state import OperationRecord
from skills.operations.record_store import RecordFile
from skills.shared.paging import after_name

DAY = 86400.0


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(operations.STATE_DIR_ENV, str(tmp_path / "state"))
    return tmp_path / "state"


def _record(created: float, tool: str = "build_image", status: str = "succeeded",
            suffix: int = 0) -> str:  # fmt: skip
    stamp = datetime.fromtimestamp(created, timezone.utc).strftime("%Y%m%d-%H%M%S")
    op_id = f"{tool}-{stamp}-{suffix:06x}"
    folder = operations.operations_dir() / op_id
    folder.mkdir(parents=True)
    RecordFile(folder / operations.RECORD, OperationRecord).write(OperationRecord(
        operation_id=op_id, tool=tool, entry="m:f", arguments={}, cwd="/", status=status,
        created_at=created, updated_at=created,
        ended_at=None if status == "running" else created,
    ))  # fmt: skip
    return op_id


def _count_reads(monkeypatch) -> list[str]:
    reads: list[str] = []
    real = operations._read

    def counted(operation_id: str):
        reads.append(operation_id)
        return real(operation_id)

    monkeypatch.setattr(operations, "_read", counted)
    return reads


def test_a_page_reads_only_as_many_records_as_it_returns(monkeypatch):
    now = time.time()
    ids = [_record(now - i * 60, suffix=i) for i in range(300)]
    reads = _count_reads(monkeypatch)
    found = operations.list_records(limit=20)
    assert [r.operation_id for r in found] == ids[:20]  # newest first
    assert len(reads) == 20


def test_a_tool_filter_is_read_from_the_names(monkeypatch):
    now = time.time()
    for i in range(50):
        _record(now - i, tool="push_to_ecr", suffix=i)
    wanted = _record(now - 100, tool="build_image", suffix=999)
    reads = _count_reads(monkeypatch)
    assert [r.operation_id for r in operations.list_records(tool="build_image", limit=5)] == [
        wanted
    ]
    assert reads == [wanted]


def test_ids_of_the_same_second_are_ordered_by_their_records_times():
    now = float(int(time.time()))
    first = _record(now + 0.1, suffix=0xAAAAAA)
    second = _record(now + 0.9, suffix=0x000001)  # sorts first by name, is newer
    assert [r.operation_id for r in operations.list_records(limit=2)] == [second, first]


def test_prune_keeps_the_newest_and_every_running_one(monkeypatch):
    monkeypatch.setattr(operations, "KEEP_COUNT", 10)
    now = time.time()
    kept = [_record(now - i * 60, suffix=i) for i in range(10)]
    over = [_record(now - 3600 - i, suffix=100 + i) for i in range(15)]
    old_running = _record(now - 90 * DAY, status="running", suffix=500)
    old_ended = _record(now - 40 * DAY, status="failed", suffix=501)

    assert operations.prune(now) == len(over) + 1
    left = {p.name for p in operations.operations_dir().iterdir()}
    assert left == {*kept, old_running}
    assert old_ended not in left


def test_prune_by_age_alone():
    now = time.time()
    recent = _record(now - 29 * DAY, suffix=1)
    _record(now - 31 * DAY, suffix=2)
    operations.prune(now)
    assert {p.name for p in operations.operations_dir().iterdir()} == {recent}


def test_prune_leaves_what_is_not_an_operation_folder(tmp_path):
    now = time.time()
    _record(now - 40 * DAY, suffix=1)
    root = operations.operations_dir()
    (root / "notes.txt").write_text("mine")
    outside = tmp_path / "outside"
    outside.mkdir()
    stamp = datetime.fromtimestamp(now - 40 * DAY, timezone.utc).strftime("%Y%m%d-%H%M%S")
    (root / f"build_image-{stamp}-00000f").symlink_to(outside)
    operations.prune(now)
    assert sorted(p.name for p in root.iterdir()) == sorted(
        ["notes.txt", f"build_image-{stamp}-00000f"]
    )
    assert outside.is_dir()


def test_list_operations_pages_with_a_cursor_reading_only_the_page(monkeypatch):
    from commands.list_operations import list_operations

    now = time.time()
    ids = [_record(now - i * 60, suffix=i, status="failed" if i % 3 else "succeeded")
           for i in range(100)]  # fmt: skip
    reads = _count_reads(monkeypatch)
    first = list_operations(limit=10)
    assert [o.operation_id for o in first.operations] == ids[:10]
    assert first.more == 90 and len(reads) == 10  # counted by name
    reads.clear()
    last = list_operations(limit=10, cursor=after_name(ids[94]))
    assert [o.operation_id for o in last.operations] == ids[95:]
    assert (last.more, last.next_cursor) == (0, None)
    assert set(reads) == {ids[94], *ids[95:]}  # the named one's second, the page: by name
    reads.clear()

    done = list_operations(status="succeeded", limit=4, cursor=after_name(ids[11]))
    assert [o.operation_id for o in done.operations] == ids[12:24:3]
    assert done.more is None and done.next_cursor  # more exist, not all counted
    tail = list_operations(status="succeeded", limit=30, cursor=after_name(ids[89]))
    assert [o.operation_id for o in tail.operations] == ids[90::3]
    assert (tail.more, tail.next_cursor) == (0, None)


def test_an_operation_started_between_pages_neither_repeats_nor_hides_one(monkeypatch):
    from commands.list_operations import list_operations

    now = time.time() - 3600
    ids = [_record(now - i * 60, suffix=i) for i in range(6)]
    first = list_operations(limit=3)
    newer = _record(now + 60, suffix=0xEE)  # started after page 1 was listed
    rest = list_operations(limit=3, cursor=first.next_cursor)
    assert [o.operation_id for o in first.operations + rest.operations] == ids
    assert newer not in [o.operation_id for o in rest.operations]


def test_a_cursor_seeks_into_one_seconds_records_and_past_unreadable_ones(monkeypatch):
    from commands.list_operations import list_operations

    now = float(int(time.time()))
    # 3 older ones, then 4 created in one second (their names do not order them, their
    # records do), then 3 newer; one of the second's records cannot be read
    older = [_record(now - 100 - i, suffix=0xA0 + i) for i in range(3)]
    second = [_record(now - 50 + 0.9 - i * 0.1, suffix=0xB0 - i) for i in range(4)]
    newer = [_record(now - 10 - i, suffix=0xC0 + i) for i in range(3)]
    (operations.operations_dir() / second[1] / operations.RECORD).write_text("{not json")
    order = newer + [second[0], *second[2:]] + older  # the unreadable one shows nowhere
    reads = _count_reads(monkeypatch)
    pages, cursor, seen = [], None, []
    while True:
        page = list_operations(limit=2, cursor=cursor)
        pages.append([o.operation_id for o in page.operations])
        seen.extend(pages[-1])
        if page.next_cursor is None:
            break
        # counted by name: the unreadable one too (last in its second) until passed
        assert page.more == 10 - len(seen) - (len(pages) >= 4)
        cursor = page.next_cursor
    assert seen == order  # nothing repeated or lost across pages
    assert [len(p) for p in pages] == [2, 2, 2, 2, 1]  # the unreadable place is read past
    reads.clear()
    tail = list_operations(limit=2, cursor=after_name(older[0]))
    assert [o.operation_id for o in tail.operations] == older[1:]
    assert set(reads) == set(older)  # the named one (its key), then the page
