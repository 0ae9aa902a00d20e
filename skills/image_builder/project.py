"""build_image in the caller's project: which Dockerfile and context (the one given;
else the project's ./Dockerfile; else the trainer image this package ships, in a
context of its own), and what a built image leads to (remembered for push_to_ecr,
whose call is its next step)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from skills.cloud.clients import default_region
from skills.image_builder import last_build
from skills.image_builder.builder import BuildOptions, build
from skills.image_builder.models import BuildResult
from skills.image_builder.packaged import trainer_context
from skills.operations.operations import state_dir
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.next_step import NextStep
from skills.shared.paths import absolute, working_dir
from skills.shared.progress import Progress


def project_dockerfile(
    given: str | None, context: str | None, call: dict[str, Any] | None = None
) -> tuple[Path, Path | None, bool]:
    """(Dockerfile, context, whether it is the packaged trainer's): the one given; else
    the project's (./Dockerfile; always with a context given); else the trainer image
    this package ships, in a build context of its own. A Dockerfile given that is not
    there is not_found, whose next step is `call` (the rest of the call) without it."""
    context_path = absolute(context) if context else None
    if given is not None:
        path = absolute(given)
        if not path.exists() and not path.is_symlink() and context is None:
            raise no_dockerfile(path, call or {})
        return path, context_path, False
    here = working_dir() / "Dockerfile"
    if context_path is not None or here.exists() or here.is_symlink():  # the project's wins
        return here, context_path, False

    packaged = trainer_context(state_dir() / "trainer_image")
    return packaged / "Dockerfile", packaged, True


def no_dockerfile(path: Path, call: dict[str, Any]) -> ToolFailure:
    """not_found for a Dockerfile the project does not have (the FSDP-on-EKS document's
    build_image(dockerfile="Dockerfile") in a project without one): leaving it out
    builds the trainer image this package ships."""
    return ToolFailure(
        ErrorCode.NOT_FOUND,
        f"No Dockerfile at {path}.",
        "Leave dockerfile out to build the trainer image this package ships (it trains "
        "any job deploy_training_job plans), or pass the path of your own Dockerfile.",
        {"field": "dockerfile", "path": str(path)},
        next_step=NextStep(
            tool="build_image", arguments=call, why="build the packaged trainer image"
        ),
    )


def build_in_project(
    options: BuildOptions, packaged: bool, progress: Progress | None = None
) -> BuildResult:
    """build(), saying whether it built the packaged trainer; a built image is
    remembered for push_to_ecr and its push is the next step."""
    result = build(options, progress)
    result.packaged_trainer = packaged
    if result.status == "built" and result.tags:
        last_build.remember(result.tags[0])
        result.next_step = push_step(result.tags[0], options.repository)
    return result


def push_step(image: str, repository: str) -> NextStep:
    """The built image's next step: push it to the ECR repository of its name."""
    region = default_region()
    host, _, rest = repository.partition("/")
    if rest and ("." in host or ":" in host or host == "localhost"):
        repository = rest  # a registry host is not part of the ECR repository's name
    return NextStep(
        tool="push_to_ecr",
        arguments={"image": image, "repository": repository, "region": region or "us-east-1"},
        why="push it to ECR" + ("" if region else " (no region configured: us-east-1 assumed)"),
    )
