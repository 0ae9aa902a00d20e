"""Lists in pages (issue 35 item 1) on the local target: `limit`, `status` and a cursor;
only the page's jobs are described, and the rest is counted."""

from __future__ import annotations

import os

from commands.list_training_jobs import list_training_jobs
from skills.training_job_deployer.targets import run_dir
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
        os.utime(runs / name / "job.json", (1e9 - age, 1e9 - age))  # newest first: this order

    described: list[str] = []
    real = run_dir._described
    monkeypatch.setattr(
        run_dir, "_described", lambda p, t, d: (described.append(p.parent.name), real(p, t, d))[1]
    )
    page = list_training_jobs(runs_dir=str(runs), limit=2)
    assert [j.job_name for j in page.jobs] == ["broken", "job-4"]
    assert (page.more, page.next_cursor) == (4, "2") and described == ["broken", "job-4"]
    assert page.jobs[0].status == "unknown"

    rest = list_training_jobs(runs_dir=str(runs), limit=10, cursor="2")
    assert [j.job_name for j in rest.jobs] == ["job-3", "job-2", "job-1", "job-0"]
    assert (rest.more, rest.next_cursor) == (0, None)

    done = list_training_jobs(runs_dir=str(runs), status="succeeded", limit=2)
    assert [j.job_name for j in done.jobs] == ["job-4", "job-3"]
    assert done.more is None and done.next_cursor == "2"  # more exist, not all counted
    second = list_training_jobs(runs_dir=str(runs), status="succeeded", limit=2, cursor="2")
    assert [j.job_name for j in second.jobs] == ["job-2", "job-1"]
    assert (second.more, second.next_cursor) == (1, "4")  # every job was read: counted
    last = list_training_jobs(runs_dir=str(runs), status="succeeded", limit=2, cursor="4")
    assert [j.job_name for j in last.jobs] == ["job-0"]
    assert (last.more, last.next_cursor) == (0, None)
