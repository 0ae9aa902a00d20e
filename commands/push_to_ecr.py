"""push_to_ecr: push a local image to Amazon ECR (repository ensured, digest verified)."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Annotated

from pydantic import Field

from commands._cli import main_for
from skills.cloud.registry_images import HOST_PATTERN
from skills.ecr_publisher import to_ecr
from skills.ecr_publisher.models import PushResult
from skills.ecr_publisher.push import PushOptions
from skills.image_builder import last_build
from skills.image_builder.tags import TAG_PATTERN
from skills.shared.confirm import Confirm
from skills.shared.progress import Progress
from skills.shared.tooling import tool
from skills.shared.validators import grammar

# ECR's repository name grammar (2-256 chars, lowercase path components).
ECR_REPOSITORY = r"^(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*$"


@tool(read_only=False, operation=True)
def push_to_ecr(
    *,
    image: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=512,
            pattern=r"^\S+$",
            description="Local image ref (default: the project's last build_image).",
        ),
    ] = None,
    repository: Annotated[
        str,
        Field(min_length=2, max_length=256, description="ECR repository (created if absent)."),
        grammar(ECR_REPOSITORY, "an ECR repository name"),
    ],
    region: Annotated[
        str | None,
        Field(
            pattern=r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$",
            description="AWS region (default: AWS_REGION, AWS_DEFAULT_REGION, the profile's).",
        ),
    ] = None,
    tag: Annotated[
        str | None, Field(pattern=TAG_PATTERN, description="Tag (default: the image's).")
    ] = None,
    scan_on_push: Annotated[
        bool | None, Field(description="Scan on push (new repo default true).")
    ] = None,
    immutable_tags: Annotated[
        bool | None, Field(description="Immutable tags (new repo default false).")
    ] = None,
    keep_last: Annotated[
        int | None, Field(ge=1, le=10_000, description="Lifecycle: keep last N (default 30).")
    ] = None,
    confirm: Annotated[Confirm, Field(description="Allow moving an existing tag.")] = False,
    registry_host: Annotated[
        str | None,
        Field(max_length=255, description="Push via HOST[:PORT] (proxy/cache)."),
        grammar(rf"^{HOST_PATTERN}$", "HOST[:PORT]"),
    ] = None,
    progress: Progress | None = None,
) -> PushResult:
    """Push a local image to ECR (the repository created if absent); returns the image
    URI and its @sha256 form.

    Creates or aligns the repository (scan, tag mutability, lifecycle), logs in with
    the ECR token, pushes, verifies the registry's digest. Settings left out keep an
    existing repo's. Left out, the image is the one build_image last built in this
    project and the region the environment's."""
    options = PushOptions(
        image=image or last_build.required_image(),
        repository=repository,
        region=region or to_ecr.configured_region(),
        tag=tag,
        scan_on_push=scan_on_push,
        immutable_tags=immutable_tags,
        keep_last=keep_last,
        confirm=confirm,
        registry_host=registry_host,
    )
    return to_ecr.push_to_ecr(options, progress)


main = main_for(push_to_ecr)


if __name__ == "__main__":
    main()
