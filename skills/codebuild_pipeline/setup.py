"""setup_codebuild's one call: the region checked, the source taken from the project's
git remote when none is given, a webhook refused for a source that cannot have one,
then the pipeline applied (or, on a dry run, its writes listed)."""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

from skills.codebuild_pipeline import plan
from skills.codebuild_pipeline.apply import apply
from skills.codebuild_pipeline.inputs import check_region
from skills.codebuild_pipeline.models import PipelineResult
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.paths import working_dir
from skills.shared.progress import Progress


def setup(
    settings: plan.Settings, dry_run: bool, progress: Progress | None = None
) -> PipelineResult:
    """`settings.source_url` "" (none given): the project's git remote origin."""
    check_region(settings.region)
    if not settings.source_url:
        settings = dataclasses.replace(settings, source_url=git_remote_url())
    source = plan.parse_source(settings.source_url)
    if settings.webhook and source.type != "GITHUB":
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"webhook needs a GitHub source; this one is {source.type}.",
            "Drop --webhook, or trigger builds from EventBridge/CodePipeline for this source.",
            {"problems": [{"field": "webhook", "problem": "needs a GitHub source"}]},
        )
    return apply(settings, dry_run, progress)


def git_remote_url(project: Path | None = None) -> str:
    """The project's git remote `origin` as a CodeBuild source URL (the seed document's
    setup-codebuild call names no --source_url), or invalid_input saying what to pass."""
    project = project or working_dir()
    try:
        done = subprocess.run(
            ["git", "-C", str(project), "remote", "get-url", "origin"],
            capture_output=True, text=True, timeout=10, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        done = None
    if done is None or done.returncode != 0 or not done.stdout.strip():
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"No source_url given, and {project} has no git remote 'origin' to take it from.",
            "Pass source_url (https://github.com/OWNER/REPO, a CodeCommit URL or "
            "s3://BUCKET/KEY.zip), or add the remote: git remote add origin URL.",
            {"problems": [{"field": "source_url", "problem": "missing"}]},
        )
    return plan.remote_as_source_url(done.stdout)
