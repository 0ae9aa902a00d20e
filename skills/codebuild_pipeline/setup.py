"""setup_codebuild's one call: the region checked, the source taken from the project's
git remote when none is given, a webhook refused for a source that cannot have one,
then the pipeline applied (or, on a dry run, its writes listed)."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

from skills.codebuild_pipeline import plan
from skills.codebuild_pipeline.apply import apply
from skills.codebuild_pipeline.inputs import check_region
from skills.codebuild_pipeline.models import PipelineResult
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.next_step import NextStep
from skills.shared.paths import working_dir
from skills.shared.progress import Progress

# The source a dry run shows when none is given and the project has no remote.
SOURCE_PLACEHOLDER = "https://github.com/OWNER/REPO"


def setup(
    settings: plan.Settings, dry_run: bool, progress: Progress | None = None
) -> PipelineResult:
    """`settings.source_url` "" (none given): the project's git remote origin; with none,
    a dry run plans with a placeholder and says so (the applied call needs a source).
    `settings.ecr_repository` "": the project's name as an ECR repository name."""
    check_region(settings.region)
    notes: list[str] = []
    if not settings.ecr_repository:
        repository = repository_for(settings.project_name)
        settings = dataclasses.replace(settings, ecr_repository=repository)
        notes.append(f"ecr_repository: {repository} (the project's name; pass it to choose)")
    if not settings.source_url:
        try:
            settings = dataclasses.replace(settings, source_url=git_remote_url())
        except ToolFailure as no_remote:
            if not dry_run:  # the call that works as it is: its dry run, to preview
                arguments = {**dataclasses.asdict(settings), "dry_run": True}
                arguments.pop("source_url")
                no_remote.next_step = NextStep(
                    tool="setup_codebuild", arguments=arguments, why="preview the writes"
                )
                raise
            settings = dataclasses.replace(settings, source_url=SOURCE_PLACEHOLDER)
            notes.append(
                f"source_url: {SOURCE_PLACEHOLDER} stands in: {no_remote.message} "
                "Pass source_url (or add the remote) to apply"
            )
    source = plan.parse_source(settings.source_url)
    if settings.webhook and source.type != "GITHUB":
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"webhook needs a GitHub source; this one is {source.type}.",
            "Drop --webhook, or trigger builds from EventBridge/CodePipeline for this source.",
            {"problems": [{"field": "webhook", "problem": "needs a GitHub source"}]},
        )
    result = apply(settings, dry_run, progress, settings_notes=tuple(notes))
    if settings.source_url == SOURCE_PLACEHOLDER and result.next_step is not None:
        # The placeholder is no source to apply: the call to make names the real one.
        arguments = {k: v for k, v in result.next_step.arguments.items() if k != "source_url"}
        result.next_step = NextStep(
            tool="setup_codebuild", arguments=arguments, why="apply it, adding source_url"
        )
    return result


def repository_for(project_name: str) -> str:
    """The ECR repository named after a CodeBuild project (pytorch-fsdp -> pytorch-fsdp):
    lower case, one separator between name parts (ECR's rule)."""
    name = re.sub(r"[._-]{2,}", "-", project_name.lower()).strip("._-")
    return name if len(name) >= 2 else f"{name}-images"


def git_remote_url(project: Path | None = None) -> str:
    """The project's git remote `origin` as a CodeBuild source URL (the seed document's
    setup-codebuild call names no --source_url), or invalid_input saying what to pass."""
    project = project or working_dir()
    try:
        done = subprocess.run(
            ["git", "-C", str(project), "remote", "get-url", "origin"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
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
