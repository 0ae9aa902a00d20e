"""Running local jobs listed from their records (issue 49 item 2): the supervisor keeps
the trainer's figures in the record, so a page of running jobs, or a status filter that
matches none of them, reads no log; a record from before (no figures) is still listed
right, from its log."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from skills.training_job_deployer.targets import run_dir
from skills.training_job_deployer.targets.base import JobPage
from skills.training_job_deployer.targets.local.record import (
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
        holder = subprocess.Popen(["/bin/sh", "-c", "sleep 120; :", "holder", *words],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        started.append(holder)
        identity = None
        while identity is None:
            identity = ProcessIdentity.of(holder.pid)
        return identity

    yield start
    for holder in started:
        holder.kill()
        holder.wait()


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
