"""build_image: analyze a trainer Dockerfile, check its base image, build it, auto-fix."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Annotated

from pydantic import Field

from commands._cli import main_for
from skills.image_builder.builder import BuildOptions
from skills.image_builder.models import BuildResult
from skills.image_builder.project import build_in_project, project_dockerfile
from skills.image_builder.registry_check import MIRROR_PATTERN
from skills.image_builder.tags import REPOSITORY_PATTERN, TAG_PATTERN, TagStrategy
from skills.shared.paths import LocalPath
from skills.shared.progress import Progress
from skills.shared.tooling import tool
from skills.shared.validators import grammar

_KEY = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"


@tool(read_only=False, operation=True)
def build_image(
    *,
    dockerfile: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=4096,
            description="Dockerfile path (default: the project's Dockerfile, else the trainer "
            "image this package ships).",
        ),
        # Read; the fix is written beside it (auto_fix) or over it (write).
        LocalPath(writable=False, written_with=("auto_fix", "write")),
    ] = None,
    context: Annotated[
        str | None,
        Field(min_length=1, max_length=4096, description="Build context dir (default: its dir)."),
        LocalPath(writable=False),
    ] = None,
    tag: Annotated[
        str | None, Field(pattern=TAG_PATTERN, description="Image tag; wins over tag_strategy.")
    ] = None,
    repository: Annotated[
        str,
        Field(max_length=255, description="Image name."),
        grammar(REPOSITORY_PATTERN, "a docker repository name"),
    ] = "fsdp-eks-trainer",
    tag_strategy: Annotated[
        TagStrategy, Field(description="auto: git sha in a repo, else next vX.Y.Z.")
    ] = "auto",
    auto_fix: Annotated[bool, Field(description="Fix known failures and rebuild.")] = True,
    max_attempts: Annotated[int, Field(ge=1, le=10, description="Builds at most.")] = 3,
    analyze_only: Annotated[bool, Field(description="Only analyze; build nothing.")] = False,
    write: Annotated[
        bool, Field(description="Apply a fix in place (else <Dockerfile>.fixed).")
    ] = False,
    base_image: Annotated[
        str | None,
        Field(pattern=r"^[^\s]{1,255}$", description="Replaces the last FROM's image."),
    ] = None,
    instance_type: Annotated[
        str | None,
        Field(pattern=r"^[a-z0-9.-]{1,40}$", description="GPU instance to check against."),
    ] = None,
    driver_version: Annotated[
        str | None, Field(pattern=r"^\d{3}(\.\d+){0,2}$", description="Node NVIDIA driver.")
    ] = None,
    base_mirror: Annotated[
        str | None,
        Field(max_length=255, description="Docker Hub mirror HOST[:PORT][/PREFIX]."),
        grammar(MIRROR_PATTERN, "HOST[:PORT][/PREFIX]"),
    ] = None,
    build_args: Annotated[
        dict[Annotated[str, Field(pattern=_KEY)], Annotated[str, Field(max_length=4096)]],
        Field(max_length=64, description="Build args KEY=VALUE."),
    ] = {},  # noqa: B006 - pydantic copies defaults
    cache_from: Annotated[
        list[Annotated[str, Field(pattern=r"^[^\s]{1,255}$")]],
        Field(max_length=16, description="Layer cache images."),
    ] = [],  # noqa: B006 - pydantic copies defaults
    progress: Progress | None = None,
) -> BuildResult:
    """Build the trainer image; on a known failure fix the Dockerfile and rebuild.

    It analyzes the Dockerfile (torch/CUDA/cuDNN/Python, GPU and driver fit), checks
    the base image exists, builds, and on a known failure writes the fix
    (<Dockerfile>.fixed) and rebuilds. Returns every attempt with its error
    class, evidence and diff, and the image id, tags and size. With no dockerfile or
    context given and no Dockerfile in the project, it builds the trainer image this
    package ships, and says so."""
    # The rest of the call, for the next step of a Dockerfile that is not there.
    rest = {
        "tag": tag,
        "repository": repository,
        "analyze_only": analyze_only,
        "instance_type": instance_type,
        "base_image": base_image,
    }
    defaults = {"repository": "fsdp-eks-trainer", "analyze_only": False}
    call = {k: v for k, v in rest.items() if v is not None and defaults.get(k) != v}
    path, context_path, packaged = project_dockerfile(dockerfile, context, call)
    options = BuildOptions(
        dockerfile=path,
        context=context_path,
        tag=tag,
        repository=repository,
        tag_strategy=tag_strategy,
        auto_fix=auto_fix,
        max_attempts=max_attempts,
        analyze_only=analyze_only,
        write=write,
        base_image=base_image,
        instance_type=instance_type,
        driver_version=driver_version,
        base_mirror=base_mirror,
        build_args=dict(build_args),
        cache_from=list(cache_from),
    )
    return build_in_project(options, packaged, progress)


main = main_for(build_image)


if __name__ == "__main__":
    main()
