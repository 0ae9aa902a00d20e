"""A local list reads no log (issue 35 item 4): the job's supervisor looks at the ended
job once and keeps its outcome (status, steps, last metrics) in the job's record, so
list_training_jobs answers from records whatever the logs hold."""

from __future__ import annotations

import json

from commands.get_training_job import get_training_job
from commands.list_training_jobs import list_training_jobs
from tests.run_copies import EndedJob, copy_of

JUNK_LINE = b"x" * 1023 + b"\n"


def test_an_ended_jobs_outcome_is_in_its_record_and_a_list_reads_no_log(
    tmp_path, ended_job: EndedJob
):
    # Each test works on copies of the session's ended job (tests/run_copies.py), so
    # neither sees the other's edits.
    runs = tmp_path / "runs"
    done = ended_job.state
    assert (done.status, done.steps) == ("succeeded", 2)
    copy_of(ended_job.run, runs, "job-0", checkpoints=False)
    record = json.loads((runs / "job-0" / "job.json").read_text())
    outcome = record["outcome"]  # the supervisor kept it at the end
    assert outcome["status"] == "succeeded" and outcome["figures"]["steps"] == 2
    assert outcome["figures"]["last_loss"] == done.last_loss

    for i in range(1, 4):
        copy = copy_of(runs / "job-0", runs, f"job-{i}", checkpoints=False)
        # The log replaced by 16 MiB with no event in it: a list that read it would lose
        # the steps and the status.
        with open(copy / "logs" / "attempt-1.log", "wb") as log:
            log.write(JUNK_LINE * 16 * 1024)
    listed = list_training_jobs(runs_dir=str(runs), limit=10).jobs
    assert {(j.job_name, j.status, j.steps, j.last_loss) for j in listed} == {
        (f"job-{i}", "succeeded", 2, done.last_loss) for i in range(4)
    }
    # The job's own call still reads its log (and says what the junk log says).
    assert get_training_job(job_name="job-3", runs_dir=str(runs)).steps == 0


def test_a_record_without_an_outcome_gets_it_on_the_first_look(tmp_path, ended_job: EndedJob):
    runs = tmp_path / "runs"
    path = copy_of(ended_job.run, runs, "old", checkpoints=False) / "job.json"
    record = json.loads(path.read_text())
    path.write_text(json.dumps({k: v for k, v in record.items() if k != "outcome"}))
    (listed,) = list_training_jobs(runs_dir=str(runs)).jobs  # read from the log, kept
    assert (listed.status, listed.steps) == ("succeeded", 2)
    assert json.loads(path.read_text())["outcome"]["figures"]["steps"] == 2
