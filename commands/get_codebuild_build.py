"""get_codebuild_build: a CodeBuild build's status, phases and log tail."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Annotated

from pydantic import Field

from commands._cli import main_for
from skills.codebuild_pipeline.builds import get_build
from skills.codebuild_pipeline.inputs import Region, check_region
from skills.codebuild_pipeline.models import CodeBuildBuild
from skills.shared.progress import Progress
from skills.shared.tooling import tool


@tool(read_only=True, idempotent=True)
def get_codebuild_build(
    *,
    build_id: Annotated[
        str,
        Field(
            pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{1,149}:[0-9a-fA-F-]{1,64}$",
            description="Build id PROJECT:UUID.",
        ),
    ],
    region: Region,
    log_lines: Annotated[int, Field(ge=0, le=500, description="Log lines to return.")] = 50,
    progress: Progress | None = None,
) -> CodeBuildBuild:
    """A CodeBuild build's status, phases (name, status, duration) and log tail."""
    check_region(region)
    return get_build(build_id, region, log_lines)


main = main_for(get_codebuild_build)


if __name__ == "__main__":
    main()
