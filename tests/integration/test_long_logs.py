"""Logs read from the end (issue 35 item 2): a finished local job whose log is far larger
than any bounded read reports the truth from its tail, in memory that does not grow
with the log. The long log is the job's real log with a sparse hole of gigabytes
(written by truncate, so the test needs no disk for it) and the last attempt's
real lines, renumbered, after it."""

from __future__ import annotations

import json
import os
import tracemalloc

from commands.get_training_job import get_training_job
from skills.training_job_deployer.trainer_log import parse_events
from tests.benchmark_runs import run_quick
from tests.run_copies import EndedJob, copy_of

GIB = 2**30


def _lengthen(log, hole_bytes: int, last_step: int) -> None:
    events = parse_events(log.read_text())
    steps = [e for e in events if e["event"] == "step"]
    summary = next(e for e in events if e["event"] == "summary")
    with log.open("r+b") as handle:
        handle.truncate(log.stat().st_size + hole_bytes)
        handle.seek(0, os.SEEK_END)
        lines = [{**steps[-1], "step": step} for step in range(last_step - 100, last_step + 1)]
        lines.append({**summary, "steps": last_step})
        # The hole has no newline: the first appended line ends its "line".
        handle.write(b"\n" + b"".join(json.dumps(e).encode() + b"\n" for e in lines))


def _copy(ended_job: EndedJob, tmp_path):
    """The session's finished 2-step local job (tests/run_copies.py), copied for one test
    (which writes into its log): its runs dir and its deploy state."""
    runs = tmp_path / "runs"
    copy_of(ended_job.run, runs, "long", checkpoints=False)
    return runs, ended_job.state


def test_a_finished_job_with_a_multi_gb_log_reports_its_true_status_and_step(
    ended_job: EndedJob, tmp_path
):
    runs, state = _copy(ended_job, tmp_path)
    assert state.status == "succeeded" and state.steps == 2
    log = runs / "long" / "logs" / "attempt-1.log"
    _lengthen(log, 3 * GIB, last_step=59_896)
    assert log.stat().st_size > 3 * GIB

    tracemalloc.start()
    state = get_training_job(job_name="long", runs_dir=str(runs))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    assert state.status == "succeeded", state.message
    assert state.steps == 59_896
    assert state.first_loss is not None  # from the head
    assert peak < 64 * 2**20  # a head and a tail, not the log


def test_a_log_just_over_head_and_tail_keeps_the_heads_start_and_the_tails_outcome(
    ended_job: EndedJob, tmp_path
):
    runs, state = _copy(ended_job, tmp_path)
    first_loss = state.first_loss
    assert first_loss is not None
    log = runs / "long" / "logs" / "attempt-1.log"
    _lengthen(log, 6 * 2**20, last_step=500)
    state = get_training_job(job_name="long", runs_dir=str(runs))
    assert (state.status, state.steps, state.first_loss) == ("succeeded", 500, first_loss)


def test_through_ssh_a_log_is_read_bounded_on_the_remote_side(tmp_path, monkeypatch):
    """The Slurm target's reads through ssh_host: an `ssh` on PATH that runs the remote
    command string in a local shell stands in for a login node (no sshd here)."""
    from skills.training_job_deployer.targets.slurm.settings import SlurmSettings
    from skills.training_job_deployer.targets.slurm.target import SlurmTarget

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ssh = bin_dir / "ssh"
    ssh.write_text('#!/bin/sh\n# ssh -o BatchMode=yes -- HOST COMMAND\nexec sh -c "$5"\n')
    ssh.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    log = tmp_path / "job.log"
    log.write_bytes(b"".join(b"line %d\n" % i for i in range(100_000)))
    target = SlurmTarget(SlurmSettings(target="slurm", ssh_host="login1", runs_dir=str(tmp_path)))

    assert target._log_size(str(log)) == log.stat().st_size
    assert target._read_from(str(log), 7, max_bytes=14) == b"line 1\nline 2\n"
    assert target._read_from(str(log), -12) == b"\nline 99999\n"
    assert len(target._read_from(str(log), 0, max_bytes=1000)) == 1000


def test_the_fleet_benchmark_runs_in_its_quick_mode(ended_job: EndedJob):
    """benchmarks/fleet_history_and_logs.py at its smallest size, so it cannot rot unseen;
    it lengthens a copy of the session's ended job's log instead of training its own."""
    out = run_quick("fleet_history_and_logs", "--from-run", str(ended_job.run))
    assert "500 records: page   20 reads" in out
    assert "16 MiB log" in out and "status succeeded" in out
    assert "tail_lines 10000: growth exponent k" in out
