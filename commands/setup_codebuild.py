"""setup_codebuild: the CodeBuild pipeline of the trainer image, created or brought up to date."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Annotated

from pydantic import Field

from commands._cli import main_for
from skills.codebuild_pipeline import plan
from skills.codebuild_pipeline.inputs import ProjectName, Region
from skills.codebuild_pipeline.models import PipelineResult
from skills.codebuild_pipeline.setup import setup
from skills.shared.progress import Progress
from skills.shared.tooling import tool


@tool(read_only=False, idempotent=True)
def setup_codebuild(
    *,
    project_name: ProjectName,
    region: Region,
    ecr_repository: Annotated[
        str | None,
        Field(
            pattern=r"^(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*$",
            min_length=2,
            max_length=256,
            description="ECR repository name (default: project_name).",
        ),
    ] = None,
    source_url: Annotated[
        str | None,
        Field(
            min_length=6,
            max_length=1024,
            description="GitHub/CodeCommit https URL or s3://bucket/key (default: the "
            "project's git remote origin).",
        ),
    ] = None,
    branch: Annotated[
        str, Field(pattern=r"^[A-Za-z0-9._/-]{1,200}$", description="Branch to build.")
    ] = plan.Settings.branch,
    webhook: Annotated[
        bool, Field(description="Build on push to branch (GitHub).")
    ] = plan.Settings.webhook,
    compute_type: Annotated[
        str, Field(pattern=r"^BUILD_[A-Z0-9_]{1,40}$", description="CodeBuild compute type.")
    ] = plan.Settings.compute_type,
    image: Annotated[
        str, Field(pattern=r"^[^\s]{1,255}$", description="Build image.")
    ] = plan.Settings.image,
    log_retention_days: Annotated[
        plan.LogRetention, Field(description="Log retention (CloudWatch values).")
    ] = plan.Settings.log_retention_days,
    test_level: Annotated[
        plan.TestLevel, Field(description="TEST_LEVEL for the buildspec.")
    ] = plan.Settings.test_level,
    tag_strategy: Annotated[
        plan.TagStrategy, Field(description="TAG_STRATEGY.")
    ] = plan.Settings.tag_strategy,
    dry_run: Annotated[bool, Field(description="Only list the writes it would make.")] = False,
    progress: Progress | None = None,
) -> PipelineResult:
    """Create or update the CodeBuild pipeline that builds and pushes the image
    (idempotent); dry_run lists every write.

    ECR repository (scan on push), least-privilege IAM service role, log group with
    retention, privileged project with Docker layer cache and buildspec.yml, optional
    push webhook. Each
    resource is created/updated/unchanged; dry_run lists every write with parameters."""
    settings = plan.Settings(
        project_name=project_name,
        region=region,
        ecr_repository=ecr_repository or "",  # none given: the project's name
        source_url=source_url or "",  # none given: the project's git remote
        branch=branch,
        webhook=webhook,
        compute_type=compute_type,
        image=image,
        log_retention_days=log_retention_days,
        test_level=test_level,
        tag_strategy=tag_strategy,
    )
    return setup(settings, dry_run, progress)


main = main_for(setup_codebuild)


if __name__ == "__main__":
    main()
