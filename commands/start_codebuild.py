"""start_codebuild: start a build of a CodeBuild project and follow its phases and log."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Annotated

from pydantic import Field

from commands._cli import main_for
from skills.codebuild_pipeline.builds import start_and_follow
from skills.codebuild_pipeline.inputs import ProjectName, Region, check_region
from skills.codebuild_pipeline.models import CodeBuildBuild
from skills.shared.progress import Progress
from skills.shared.tooling import tool


@tool(read_only=False, operation=True)
def start_codebuild(
    *,
    project_name: ProjectName,
    region: Region,
    env: Annotated[
        dict[
            Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")],
            Annotated[str, Field(max_length=4096)],
        ],
        Field(
            max_length=64,
            description="buildspec.yml's knobs KEY=VALUE (TEST_LEVEL, DOCKERFILE, ...); "
            "secrets only as KEY=ssm:/param or KEY=secretsmanager:<arn>.",
        ),
    ] = {},  # noqa: B006 - pydantic copies defaults
    source_version: Annotated[
        str | None, Field(pattern=r"^[^\s]{1,255}$", description="Branch, tag or commit.")
    ] = None,
    follow_minutes: Annotated[
        float, Field(ge=0, le=480, description="Follow the build at most this long.")
    ] = 120,
    log_lines: Annotated[int, Field(ge=0, le=500, description="Log lines in the result.")] = 50,
    progress: Progress | None = None,
) -> CodeBuildBuild:
    """Start a CodeBuild build and follow its phases and log tail to the end.

    env overrides the project's environment for this build; the log tail is
    CloudWatch's."""
    check_region(region)
    return start_and_follow(
        project_name, region, dict(env), source_version, follow_minutes * 60, log_lines, progress
    )


main = main_for(start_codebuild)


if __name__ == "__main__":
    main()
