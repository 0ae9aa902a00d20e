"""The CLI works on the project a command starts in, as the server does (issue 46 item
3): from a subfolder, the jobs go to the project root's runs/ (where the server's are),
while a relative path typed on the command line is the shell's, from that subfolder."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from commands._cli import run_cli
from commands.deploy_training_job import deploy_training_job


@pytest.fixture
def subfolder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    monkeypatch.delenv("FSDP_EKS_WORKSPACE", raising=False)
    monkeypatch.chdir(project / "src")
    return project / "src"


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    status = run_cli(deploy_training_job, ["--dry_run", "--json", "--gpu_per_node", "1", *argv])
    out = capsys.readouterr().out
    assert status == 0, out
    return json.loads(out)["plan"]


def test_from_a_subfolder_the_jobs_are_the_project_roots(subfolder, capsys):
    plan = _plan(capsys, "--job_name", "sub")
    assert plan["run_dir"] == str(subfolder.parent / "runs" / "sub")


def test_a_typed_relative_path_is_from_the_folder_the_command_starts_in(subfolder, capsys):
    (subfolder / "data.txt").write_text("some text\n")
    plan = _plan(capsys, "--job_name", "typed", "--dataset", "data.txt", "--runs_dir", "jobs")
    assert str(subfolder / "data.txt") in plan["argv"]
    assert plan["run_dir"] == str(subfolder / "jobs" / "typed")


def test_a_missing_file_typed_from_a_subfolder_is_named_where_it_was_typed(subfolder, capsys):
    """`data/train.jsonl` is a file that is missing, not a hub repo: the refusal names the
    path the user typed, from the subfolder, not one under the project root."""
    status = run_cli(deploy_training_job, ["--dry_run", "--job_name", "gone", "--gpu_per_node",
                                           "1", "--dataset", "data/train.jsonl"])  # fmt: skip
    err = capsys.readouterr().err
    assert status != 0
    assert str(subfolder / "data" / "train.jsonl") in err, err
