"""Lists in pages (issue 35 item 1) on the local target: `limit`, `status` and a cursor;
only the page's jobs are described, and the rest is counted. A cursor is a key, not an
offset (issue 45): a job updated between two pages neither repeats nor hides another."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from commands.list_training_jobs import list_training_jobs
from skills.shared.errors import ToolFailure
from skills.training_job_deployer.targets import job_index
from tests.run_copies import EndedJob, copy_of


def test_a_local_list_pages_describe_only_the_page(tmp_path, monkeypatch, ended_job: EndedJob):
    runs = tmp_path / "runs"
    # Five copies of the session's real ended job (tests/run_copies.py), not a job of its own.
    assert ended_job.state.status == "succeeded", ended_job.state.log_tail
    for i in range(5):
        copy_of(ended_job.run, runs, f"job-{i}", checkpoints=False)
    (runs / "broken").mkdir()
    (runs / "broken" / "job.json").write_text("not json")
    for age, name in enumerate(["broken", "job-4", "job-3", "job-2", "job-1", "job-0"]):
        submitted(runs / name, 1e9 - age)  # newest first: this order

    described: list[str] = []
    real = job_index._described
    monkeypatch.setattr(
        job_index, "_described", lambda p, t, d: (described.append(p.parent.name), real(p, t, d))[1]
    )
    page = list_training_jobs(runs_dir=str(runs), limit=2)
    assert [j.job_name for j in page.jobs] == ["broken", "job-4"]
    assert page.more == 4 and described == ["broken", "job-4"]
    assert page.jobs[0].status == "unknown"

    rest = list_training_jobs(runs_dir=str(runs), limit=10, cursor=page.next_cursor)
    assert [j.job_name for j in rest.jobs] == ["job-3", "job-2", "job-1", "job-0"]
    assert (rest.more, rest.next_cursor) == (0, None)

    done = list_training_jobs(runs_dir=str(runs), status="succeeded", limit=2)
    assert [j.job_name for j in done.jobs] == ["job-4", "job-3"]
    assert done.more is None and done.next_cursor  # more exist, not all counted
    second = list_training_jobs(
        runs_dir=str(runs), status="succeeded", limit=2, cursor=done.next_cursor
    )
    assert [j.job_name for j in second.jobs] == ["job-2", "job-1"]
    assert second.more == 1  # every job was read: counted
    last = list_training_jobs(
        runs_dir=str(runs), status="succeeded", limit=2, cursor=second.next_cursor
    )
    assert [j.job_name for j in last.jobs] == ["job-0"]
    assert (last.more, last.next_cursor) == (0, None)


def submitted(run: Path, when: float) -> None:
    """The job's record says it was submitted at `when` (a copy keeps the original's)."""
    record = run / "job.json"
    try:
        data = json.loads(record.read_text())
    except ValueError:  # the broken one: its file's time stands in
        data = None
    if data is not None:
        record.write_text(json.dumps({**data, "submitted_at": when}))
    os.utime(record, (when, when))  # as written then


def updated(run: Path) -> None:
    """What an update does to a job's record: rewritten, with a new mtime."""
    record = run / "job.json"
    record.write_text(record.read_text())
    later = time.time() + 60
    os.utime(record, (later, later))


def test_a_job_updated_between_pages_neither_repeats_nor_hides_another(tmp_path, ended_job):
    runs = tmp_path / "runs"
    names = [f"job-{i}" for i in range(7)]
    for age, name in enumerate(names):
        copy_of(ended_job.run, runs, name, checkpoints=False)
        submitted(runs / name, 1e9 - age)
    first = list_training_jobs(runs_dir=str(runs), limit=3)
    assert [j.job_name for j in first.jobs] == names[:3]
    updated(runs / names[1])  # on page 1
    updated(runs / names[4])  # on page 2
    seen = [j.job_name for j in first.jobs]
    cursor = first.next_cursor
    while cursor is not None:
        page = list_training_jobs(runs_dir=str(runs), limit=3, cursor=cursor)
        seen += [j.job_name for j in page.jobs]
        cursor = page.next_cursor
    assert seen == names  # every job exactly once, in the order they were submitted


@pytest.mark.parametrize(
    "cursor",
    ["2", "bm90LWpzb24", "eyJrIjpbXX0", "eyJrIjpbMV19", "eyJuIjoxfQ", "eyJrIjpbInNydi0wMCJdfQ"],
    ids=[
        "an offset",
        "not json",
        "an empty key",
        "a key without a name",
        "a name not text",
        "a model server list's",
    ],
)
def test_a_cursor_this_tool_did_not_make_is_invalid_input(tmp_path, ended_job, cursor):
    copy_of(ended_job.run, tmp_path / "runs", "job-0", checkpoints=False)
    with pytest.raises(ToolFailure) as info:
        list_training_jobs(runs_dir=str(tmp_path / "runs"), cursor=cursor)
    assert info.value.code == "invalid_input"


def test_a_cursor_naming_a_job_continues_after_it(tmp_path, ended_job):
    """The result cap's rest call names the last entry it kept (skills.shared.paging)."""
    from skills.shared.paging import after_name

    runs = tmp_path / "runs"
    for age, name in enumerate(["a", "b", "c"]):
        copy_of(ended_job.run, runs, name, checkpoints=False)
        submitted(runs / name, 1e9 - age)
    rest = list_training_jobs(runs_dir=str(runs), cursor=after_name("a"))
    assert [j.job_name for j in rest.jobs] == ["b", "c"]
    with pytest.raises(ToolFailure, match="no longer listed"):
        list_training_jobs(runs_dir=str(runs), cursor=after_name("gone"))
