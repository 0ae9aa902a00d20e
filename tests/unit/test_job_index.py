"""The runs' index of local and Slurm job records (issue 49 item 1): a list reads the
records of its page only, and a status filter only those that may match (none when
none can); the index is derived from the records (made on first use, so records from
before it migrate and none is lost; made again when corrupt; never by a read-only
server) and noted by each record's writer."""

from __future__ import annotations

import gc
import sqlite3
import time
import tracemalloc
import weakref
from functools import partial
from pathlib import Path

import pytest

from skills.operations.record_store import RecordFile
from skills.shared.paging import cursor_after
from skills.shared.write_gate import closed_to_writes
from skills.training_job_deployer.targets.base import JobPage
from skills.training_job_deployer.targets.job_index import JobIndex
from skills.training_job_deployer.targets.local.record import RECORD, JobRecord, RunDir
from skills.training_job_deployer.targets.local.target import LocalTarget
from skills.training_job_deployer.targets.run_dir import JobOutcome
from skills.training_job_deployer.targets.slurm.record import (
    SLURM_RECORD,
    SlurmEnd,
    SlurmRecord,
    SlurmRunDir,
)
from skills.training_job_deployer.targets.slurm.settings import SlurmSettings
from skills.training_job_deployer.targets.slurm.target import SlurmTarget

NOW = time.time() - 3600


def local_record(runs: Path, i: int, status: str = "succeeded", noted: bool = False) -> str:
    """An ended local job with its outcome kept; `noted`: written as the target writes it
    now (noted in the index), else as a version before the index wrote it."""
    name = f"job-{i:05d}"
    record = JobRecord(
        job_name=name, attempt=1, argv=["torchrun"], submitted_at=NOW - i, ended_at=NOW - i,
        exit_code=0 if status == "succeeded" else 1,
        outcome=JobOutcome(status=status, figures={"steps": 10}),  # type: ignore[arg-type]
    )  # fmt: skip
    (runs / name).mkdir(parents=True, exist_ok=True)
    file = RunDir(runs / name).record_file if noted else RecordFile(runs / name / RECORD, JobRecord)
    file.write(record)
    return name


def slurm_record(runs: Path, i: int, status: str = "succeeded", noted: bool = True) -> str:
    """An ended Slurm job as the target writes it after the scheduler's last word and
    the first look that kept its outcome (no sbatch: the record is the target's)."""
    name = f"sjob-{i:05d}"
    record = SlurmRecord(
        job_name=name, slurm_job_id=1000 + i, submitted_at=NOW - i,
        end=SlurmEnd(state="COMPLETED" if status == "succeeded" else "FAILED", exit_code=0),
        outcome=JobOutcome(status=status, figures={"steps": 10}),  # type: ignore[arg-type]
    )  # fmt: skip
    (runs / name).mkdir(parents=True, exist_ok=True)
    run = SlurmRunDir(runs / name, f"/cluster/{name}")
    file = run.record_file if noted else RecordFile(runs / name / SLURM_RECORD, SlurmRecord)
    file.write(record)
    return name


@pytest.fixture
def reads(monkeypatch) -> list[Path]:
    """Every record read (RecordFile.read), by path."""
    seen: list[Path] = []
    real = RecordFile.read

    def counted(self):
        seen.append(self.path)
        return real(self)

    monkeypatch.setattr(RecordFile, "read", counted)
    return seen


def rows(runs: Path, record: str = RECORD) -> dict[str, str | None]:
    path = JobIndex(runs, record).index.path
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        return dict(conn.execute("SELECT name, status FROM records"))


def names(page) -> list[str]:
    return [j.job_name for j in page.items]


def test_local_records_from_before_the_index_migrate_once_then_a_status_matching_none_reads_none(
    tmp_path, reads
):
    runs = tmp_path / "runs"
    every = [local_record(runs, i) for i in range(200)]
    failed = local_record(runs, 500, "failed")
    target = LocalTarget(runs)
    assert names(target.list_jobs(JobPage(status="failed", limit=20))) == [failed]
    assert len(reads) == 201 + 1  # each once into the index, then the one that may match
    assert rows(runs) == {**dict.fromkeys(every, "succeeded"), failed: "failed"}
    reads.clear()
    assert names(target.list_jobs(JobPage(status="cancelled", limit=20))) == []
    assert reads == []
    whole = target.list_jobs(JobPage())
    assert names(whole) == [*every, failed] and whole.more == 0  # nothing lost, in order


def test_a_page_reads_its_own_records_only_and_its_cursor_goes_on_in_order(tmp_path, reads):
    runs = tmp_path / "runs"
    every = [local_record(runs, i, noted=True) for i in range(120)]
    target = LocalTarget(runs)
    reads.clear()
    first = target.list_jobs(JobPage(limit=20))
    assert names(first) == every[:20] and first.more == 100
    assert len(reads) == 20  # on main every record was read for its place
    assert first.last is not None
    after = JobPage(limit=20, cursor=cursor_after(first.last))
    assert names(target.list_jobs(after)) == every[20:40]


def test_slurm_records_written_as_the_target_writes_them_are_noted_and_filtered_unread(
    tmp_path, reads
):
    runs = tmp_path / "slurm-runs"
    every = [slurm_record(runs, i) for i in range(64)]
    assert rows(runs, SLURM_RECORD) == dict.fromkeys(every, "succeeded")  # noted by the writer
    target = SlurmTarget(SlurmSettings(target="slurm", runs_dir=str(runs)))
    reads.clear()
    assert names(target.list_jobs(JobPage(status="failed", limit=20))) == []
    assert reads == []
    assert names(target.list_jobs(JobPage(status="succeeded", limit=5))) == every[:5]


def test_a_record_changed_behind_the_index_is_read_again(tmp_path, reads):
    runs = tmp_path / "runs"
    every = [local_record(runs, i, noted=True) for i in range(30)]
    target = LocalTarget(runs)
    assert names(target.list_jobs(JobPage(status="failed"))) == []
    local_record(runs, 7, "failed")  # rewritten by a writer that does not note it
    reads.clear()
    assert names(target.list_jobs(JobPage(status="failed"))) == [every[7]]
    assert len(reads) == 2  # the changed one, synced, then listed


def test_removed_jobs_leave_the_index_and_a_corrupt_index_is_made_again(tmp_path):
    runs = tmp_path / "runs"
    every = [local_record(runs, i, "failed", noted=True) for i in range(12)]
    target = LocalTarget(runs)
    for name in every[:4]:
        (runs / name / RECORD).unlink()
    assert names(target.list_jobs(JobPage(status="failed"))) == every[4:]
    assert set(rows(runs)) == set(every[4:])
    index = JobIndex(runs, RECORD).index.path
    index.write_bytes(b"not a database" * 512)
    for suffix in ("-wal", "-shm"):
        Path(f"{index}{suffix}").unlink(missing_ok=True)
    assert names(target.list_jobs(JobPage(status="failed"))) == every[4:]
    assert rows(runs) == dict.fromkeys(every[4:], "failed")


def test_a_read_only_server_lists_from_the_records_and_makes_no_index(tmp_path):
    runs = tmp_path / "runs"
    every = [local_record(runs, i) for i in range(10)]
    with closed_to_writes():
        assert names(LocalTarget(runs).list_jobs(JobPage(status="succeeded"))) == every
    assert not JobIndex(runs, RECORD).index.path.exists()


def test_a_running_job_is_a_candidate_for_failed_and_cancelled_only(tmp_path, reads):
    """A record that has not ended is `running` in the index: listed running, or failed
    or cancelled once its processes are gone (here: none ever ran)."""
    runs = tmp_path / "runs"
    name = "job-running"
    (runs / name).mkdir(parents=True)
    RunDir(runs / name).record_file.write(
        JobRecord(job_name=name, attempt=1, argv=["torchrun"], submitted_at=NOW)
    )
    target = LocalTarget(runs)
    assert rows(runs) == {name: "running"}
    reads.clear()
    assert names(target.list_jobs(JobPage(status="succeeded"))) == []
    assert reads == []
    assert names(target.list_jobs(JobPage(status="failed"))) == [name]


def test_each_write_of_a_job_record_is_noted_as_the_job_moves_on(tmp_path, reads):
    """Submit (running), the supervisor's end (ended, outcome not yet read: any status),
    the first look's outcome: each write under the job's lock notes its row, so a list
    that follows reads nothing to know what the index knows."""
    runs = tmp_path / "runs"
    run = RunDir(runs / "job-a")
    run.path.mkdir(parents=True)
    seen = []
    run.record_file.write(JobRecord(job_name="job-a", attempt=1, argv=["t"], submitted_at=NOW))
    seen.append(rows(runs)["job-a"])
    run.record_file.update(lambda r: None if r is None else r.finished(0))
    seen.append(rows(runs)["job-a"])
    outcome = JobOutcome(status="succeeded")
    run.record_file.update(
        lambda r: None if r is None else r.model_copy(update={"outcome": outcome})
    )
    seen.append(rows(runs)["job-a"])
    assert seen == ["running", None, "succeeded"]
    reads.clear()
    assert names(LocalTarget(runs).list_jobs(JobPage(status="failed"))) == []
    assert reads == []


def _peak_mib(call) -> float:
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def test_a_page_and_a_filter_matching_none_take_the_same_memory_at_16x_the_jobs(tmp_path):
    """The index is walked a row at a time (the sync a lookup per record, a page from its
    cursor until full): no list, set or dict of every job (on main, 0.4 MiB more at 1,024
    jobs than at 64)."""
    peaks = {}
    for count in (64, 1024):
        runs = tmp_path / str(count)
        for i in range(count):
            local_record(runs, i)
        target = LocalTarget(runs)
        target.list_jobs(JobPage(limit=1))  # migrated: each record read once
        peaks[count] = [
            _peak_mib(partial(target.list_jobs, JobPage(limit=20))),
            _peak_mib(partial(target.list_jobs, JobPage(limit=20, status="failed"))),
        ]
    for small, large in zip(peaks[64], peaks[1024], strict=True):
        assert large < small + 0.06, peaks


def test_a_small_record_is_read_into_a_buffer_of_its_size(tmp_path):
    """A record's limit is 16 MiB: a read sized to the limit held that much for each
    record a page read (16 MiB peak a page on main)."""
    name = local_record(tmp_path, 1)
    file = RunDir(tmp_path / name).record_file
    assert _peak_mib(file.read) < 0.5
    assert file.read() is not None


def test_a_filter_walks_the_index_past_its_batches_in_order(tmp_path):
    """Rows are read 64 at a time from the cursor: matches far apart come all, in order,
    page after page."""
    runs = tmp_path / "runs"
    every = [local_record(runs, i, "failed" if i % 10 == 9 else "succeeded", noted=True)
             for i in range(150)]  # fmt: skip
    failed = [n for i, n in enumerate(every) if i % 10 == 9]
    target = LocalTarget(runs)
    assert names(target.list_jobs(JobPage(status="failed"))) == failed
    seen, page = [], target.list_jobs(JobPage(status="failed", limit=4))
    while True:
        seen += names(page)
        if not page.more and page.more is not None:
            break
        assert page.last is not None
        page = target.list_jobs(JobPage(status="failed", limit=4, cursor=cursor_after(page.last)))
    assert seen == failed
    whole = target.list_jobs(JobPage(limit=100))
    assert names(whole) == every[:100] and whole.more == 50


@pytest.mark.parametrize("run_dir", [RunDir, partial(SlurmRunDir, cluster_dir="/c")])
def test_a_jobs_run_is_freed_when_dropped_without_the_garbage_collector(tmp_path, run_dir):
    """A list makes a run per job it looks at; one that is a reference cycle (its record
    file holding a bound method of it) lives until a collection, so a list's peak memory
    grew with the jobs (each write is still noted: the test above)."""
    gc.disable()
    try:
        run = run_dir(tmp_path / "runs" / "job-a")
        gone = weakref.ref(run)
        del run
        assert gone() is None
    finally:
        gc.enable()
