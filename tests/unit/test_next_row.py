"""A result's next step is one CLI row, made in one place (ToolResult.cli_rows): every
result that carries a next_step shows it once, last, and no summary_rows spells it."""

from __future__ import annotations

import pytest

from commands import all_tools
from skills.shared.next_step import NextStep
from skills.shared.results import ToolResult

all_tools()  # every tool module imported: their result classes exist


def _subclasses(cls: type) -> list[type]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


WITH_STEP = sorted(
    {c for c in _subclasses(ToolResult) if "next_step" in c.model_fields}, key=lambda c: c.__name__
)

# Each result's required fields (data, one row per class; a new result needs a row).
REQUIRED = {
    "BuildResult": {"status": "succeeded", "dockerfile": "Dockerfile"},
    "ClusterReport": {"action": "describe"},
    "CodeBuildBuild": {"build_id": "p:1", "project_name": "p", "status": "IN_PROGRESS",
                       "complete": False},
    "DeletedJob": {"job_name": "j", "target": "local", "status": "deleted"},
    "DeployResult": {"job_name": "j", "target": "local", "status": "running", "plan": None},
    "JobLogs": {"job_name": "j", "target": "local", "log_path": "l", "lines": 1, "tail_lines": 2,
                "text": "x"},
    "JobState": {"job_name": "j", "target": "local", "status": "running"},
    "OperationState": {"operation_id": "op", "tool": "t", "status": "running",
                       "created_at": 0.0, "elapsed_s": 1.0},
    "PipelineResult": {"status": "planned", "dry_run": True, "project_name": "p",
                       "region": "us-east-1", "source_type": "S3", "resources": []},
    "PushResult": {"image_uri": "h/r:t", "image_uri_digest": "h/r@sha256:0", "digest": "sha256:0",
                   "repository": "r", "region": "us-east-1", "tag": "t", "pushed_to": "h",
                   "repository_action": "unchanged", "scan_on_push": True,
                   "immutable_tags": False},
    "ServerState": {"name": "s", "target": "local", "status": "ready"},
    "TransferResult": {"action": "fetch", "status": "planned", "source": "s3://b/p", "dest": "out"},
}  # fmt: skip


def test_every_result_with_a_next_step_has_a_row():
    assert {c.__name__ for c in WITH_STEP} == set(REQUIRED)


@pytest.mark.parametrize("cls", WITH_STEP, ids=lambda c: c.__name__)
def test_the_next_step_is_one_row_last(cls):
    step = NextStep(tool="get_training_job", arguments={"job_name": "j"}, why="follow it")
    result = cls.model_construct(**REQUIRED[cls.__name__], next_step=step)
    assert all(key != "next" for key, _ in result.summary_rows())
    rows = result.cli_rows()
    assert [key for key, _ in rows].count("next") == 1
    assert rows[-1] == ("next", step.text())
    without = cls.model_construct(**REQUIRED[cls.__name__])
    assert all(key != "next" for key, _ in without.cli_rows())
