"""Running local jobs listed from their records (issue 49 item 2): the supervisor keeps
the trainer's figures in the record, so a page of running jobs, or a status filter that
matches none of them, reads no log; a record from before (no figures) is still listed
right, from its log."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skills.training_job_deployer.targets import run_dir
from skills.training_job_deployer.targets.base import JobPage
from skills.training_job_deployer.targets.job_index import JobIndex
from skills.training_job_deployer.targets.local.record import (
    RECORD,
    SUPERVISOR_MODULE,
    JobProgress,
    JobRecord,
    ProcessIdentity,
    RunDir,
)
from skills.training_job_deployer.targets.local.supervisor import Supervisor
from skills.training_job_deployer.targets.local.target import LocalPlan, LocalTarget

STEP = '{"event": "step", "step": %d, "loss": %.1f, "tokens_per_s": 100.0}\n'


@pytest.fixture
def supervisors():
    """Stand-ins for the jobs' supervisors: a process whose command line names the run
    directories as a supervisor's does (`-m <module> <run_dir>`)."""
    started: list[subprocess.Popen[bytes]] = []

    def start(runs: list[Path]) -> ProcessIdentity:
        words = [w for r in runs for w in ("-m", SUPERVISOR_MODULE, str(r))]
        holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", *words],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        started.append(holder)
        identity = None
        while identity is None:
            identity = ProcessIdentity.of(holder.pid)
        return identity

    start.started = started  # type: ignore[attr-defined]
    yield start
    for holder in started:
        holder.kill()
        holder.wait()  # a second wait (a test killed it) returns at once


def _running(runs: Path, count: int, supervisors, progress: bool = True) -> list[str]:
    names = [f"job-{i:03d}" for i in range(count)]
    identity = supervisors([runs / n for n in names])
    now = time.time()
    for i, name in enumerate(names):
        run = RunDir(runs / name)
        run.log(1).parent.mkdir(parents=True)
        run.log(1).write_text("".join(STEP % (s, 9.0 - s / 10) for s in range(1, 31)))
        figures = {"steps": 30, "max_steps": 100, "first_loss": 8.9, "last_loss": 6.0}
        run.record_file.write(JobRecord(
            job_name=name, attempt=1, argv=["torchrun"], submitted_at=now - i,
            supervisor=identity,
            progress=JobProgress(at=now, figures=figures) if progress else None,
        ))  # fmt: skip
    return names


def _count_log_reads(monkeypatch) -> list[str]:
    reads: list[str] = []
    real = run_dir.read_chunk

    def counted(path, *args, **kwargs):
        reads.append(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(run_dir, "read_chunk", counted)
    return reads


def test_a_page_of_running_jobs_reads_no_log(tmp_path, monkeypatch, supervisors):
    names = _running(tmp_path, 30, supervisors)
    reads = _count_log_reads(monkeypatch)
    page = LocalTarget(tmp_path).list_jobs(JobPage(limit=20))
    assert [j.job_name for j in page.items] == names[:20] and page.more == 10
    assert {(j.status, j.steps, j.last_loss) for j in page.items} == {("running", 30, 6.0)}
    assert reads == []


def test_a_status_filter_that_matches_no_running_job_reads_no_log(
    tmp_path, monkeypatch, supervisors
):
    _running(tmp_path, 30, supervisors)
    reads = _count_log_reads(monkeypatch)
    for status in ("failed", "succeeded", "cancelled"):
        page = LocalTarget(tmp_path).list_jobs(JobPage(limit=20, status=status))
        assert (page.items, page.more) == ([], 0)
    assert reads == []


def test_a_running_job_recorded_before_figures_were_kept_is_listed_from_its_log(
    tmp_path, monkeypatch, supervisors
):
    (name,) = _running(tmp_path, 1, supervisors, progress=False)
    reads = _count_log_reads(monkeypatch)
    (job,) = LocalTarget(tmp_path).list_jobs(JobPage(limit=20)).items
    assert (job.job_name, job.status, job.steps) == (name, "running", 30)
    assert reads  # nothing lost: the log says what the record does not


def test_the_supervisor_keeps_the_trainers_figures_in_the_record(tmp_path):
    run = RunDir(tmp_path / "job")
    run.path.mkdir()
    run.record_file.write(JobRecord(job_name="job", attempt=1, argv=["torchrun"],
                                    submitted_at=time.time()))  # fmt: skip
    plan = LocalPlan(argv=["torchrun"], env={}, cwd=str(tmp_path), run_dir=str(run.path),
                     attempt=1, log_path=str(run.log(1)), nproc_per_node=1,
                     checkpoint_dir=str(tmp_path / "ckpt"))  # fmt: skip
    supervisor = Supervisor(run, plan)
    for step in (1, 2, 3):
        supervisor._watch(STEP % (step, 5.0 - step))
    supervisor._watch("not an event\n")
    supervisor._watch('{"event": "step"}\n')  # malformed: no figure, no failure
    supervisor.record_progress()
    progress = run.record_file.read().progress  # type: ignore[union-attr]
    assert progress is not None
    assert (progress.figures["steps"], progress.figures["last_loss"]) == (3, 2.0)
    ended = run.record_file.read().finished(0)  # type: ignore[union-attr]
    run.record_file.write(ended)
    supervisor._watch(STEP % (4, 1.0))
    supervisor.record_progress()  # an ended record stays as it is
    assert run.record_file.read() == ended


def _edit_unseen(record: Path, old: str, new: str) -> None:
    """The record changed in place as no writer changes it, its size and time kept, so
    only a read of the record (not its stat, not the index) can see the change."""
    assert len(old) == len(new)
    st = record.stat()
    text = record.read_text()
    assert text.count(old) == 1
    with record.open("r+") as f:  # the same inode
        f.write(text.replace(old, new))
    os.utime(record, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_failed_filter_over_running_jobs_reads_their_rows_not_their_records(
    tmp_path, supervisors
):
    """A running job's row names its supervisor, so the processes are looked at without
    the record. Each record here is edited unseen to name a supervisor that started 10 s
    later (no such process: read, the job is failed); the rows still name the live one,
    so a filter that reads no record finds none failed (on main: all 30, each read)."""
    names = _running(tmp_path, 30, supervisors)
    target = LocalTarget(tmp_path)
    assert target.list_jobs(JobPage(limit=20, status="succeeded")).items == []  # synced
    for name in names:
        record = RunDir(tmp_path / name).record_file.path
        started = json.loads(record.read_text())["supervisor"]["started"]
        text = json.dumps(started)
        tens = len(text.split(".")[0]) - 2  # the tens of seconds
        moved = text[:tens] + str((int(text[tens]) + 1) % 10) + text[tens + 1 :]
        _edit_unseen(record, f'"started": {text}', f'"started": {moved}')
    page = target.list_jobs(JobPage(limit=20, status="failed"))
    assert (page.items, page.more) == ([], 0)


def test_a_running_job_whose_processes_are_gone_is_listed_failed_from_its_record(
    tmp_path, supervisors
):
    names = _running(tmp_path, 3, supervisors)
    target = LocalTarget(tmp_path)
    assert target.list_jobs(JobPage(status="failed")).items == []
    for holder in supervisors.started:
        holder.kill()
        holder.wait()
    page = target.list_jobs(JobPage(status="failed"))
    listed = [(j.job_name, j.status, j.steps) for j in page.items]
    assert listed == [(n, "failed", 30) for n in names]
    assert "stopped without recording" in (page.items[0].message or "")


def test_a_job_whose_supervisor_died_unrecorded_is_ended_by_the_first_look_and_then_reads_no_log(
    tmp_path, monkeypatch, supervisors
):
    (name,) = _running(tmp_path, 1, supervisors)
    target = LocalTarget(tmp_path)
    for holder in supervisors.started:
        holder.kill()
        holder.wait()
    first = target.list_jobs(JobPage(status="failed")).items
    record = RunDir(tmp_path / name).record_file.read()
    assert record is not None and record.ended and record.outcome is not None
    assert record.failure is not None and "stopped without recording" in record.failure.message
    reads = _count_log_reads(monkeypatch)
    again = target.list_jobs(JobPage(status="failed")).items
    assert [(j.status, j.steps, j.message) for j in again] == [
        (j.status, j.steps, j.message) for j in first
    ] == [("failed", 30, first[0].message)]
    assert reads == []  # ended in its record: listed from its outcome
    assert target.list_jobs(JobPage(status="running")).items == []


def test_a_job_whose_supervisor_is_not_started_yet_is_not_ended_by_a_look(tmp_path):
    # submit writes the record, then starts the supervisor and names it (holding the
    # job's lock): a look between the two must not end an attempt about to run.
    run = RunDir(tmp_path / "starting")
    run.log(1).parent.mkdir(parents=True)
    run.log(1).write_text("")
    run.record_file.write(
        JobRecord(job_name="starting", attempt=1, argv=["torchrun"], submitted_at=time.time())
    )
    assert LocalTarget(tmp_path).describe("starting").status == "failed"  # as it looks now
    record = run.record_file.read()
    assert record is not None and not record.ended and record.outcome is None


def test_a_cancelled_job_whose_supervisor_died_is_ended_cancelled(tmp_path, supervisors):
    (name,) = _running(tmp_path, 1, supervisors)
    run = RunDir(tmp_path / name)
    run.record_file.update(lambda r: r.model_copy(update={"cancel_requested_at": time.time()}))
    for holder in supervisors.started:
        holder.kill()
        holder.wait()
    assert LocalTarget(tmp_path).describe(name).status == "cancelled"
    record = run.record_file.read()
    assert record is not None and record.ended and record.failure is None
    assert record.outcome is not None and record.outcome.status == "cancelled"


def test_the_index_keeps_the_figures_the_supervisor_writes_as_the_job_goes(tmp_path, supervisors):
    (name,) = _running(tmp_path, 1, supervisors)
    run = RunDir(tmp_path / name)
    index = JobIndex(tmp_path, RECORD).index.path

    def row() -> tuple:
        with sqlite3.connect(index) as conn:
            return conn.execute(
                "SELECT status, step, loss, ended_at, supervisor_pid FROM records"
            ).fetchone()

    identity = run.record_file.read().supervisor  # type: ignore[union-attr]
    assert identity is not None
    assert row() == ("running", 30, 6.0, None, identity.pid)
    plan = LocalPlan(argv=["torchrun"], env={}, cwd=str(tmp_path), run_dir=str(run.path),
                     attempt=1, log_path=str(run.log(1)), nproc_per_node=1,
                     checkpoint_dir=str(tmp_path / "ckpt"))  # fmt: skip
    supervisor = Supervisor(run, plan)
    supervisor._watch(STEP % (31, 5.5))
    supervisor.record_progress()
    assert row() == ("running", 31, 5.5, None, identity.pid)
    ended = run.record_file.read().finished(0)  # type: ignore[union-attr]
    run.record_file.write(ended)
    assert row()[:4] == (None, None, None, ended.ended_at)  # ended, its outcome not read yet
