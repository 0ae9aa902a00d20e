"""push_to_ecr: push a local image to Amazon ECR (repository ensured, digest verified)."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

import re
from typing import Annotated

from pydantic import Field

from commands._cli import main_for
from skills.ecr_publisher.models import PushResult
from skills.ecr_publisher.push import PushOptions, publish
from skills.image_builder.registry_check import HOST_PATTERN
from skills.image_builder.tags import TAG_PATTERN
from skills.shared.confirm import Confirm
from skills.shared.next_step import NextStep
from skills.shared.progress import Progress
from skills.shared.tooling import tool
from skills.shared.validators import grammar

# ECR's repository name grammar (2-256 chars, lowercase path components).
ECR_REPOSITORY = r"^(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*$"


@tool(read_only=False, operation=True)
def push_to_ecr(
    *,
    image: Annotated[
        str, Field(min_length=1, max_length=512, pattern=r"^\S+$", description="Local image ref.")
    ],
    repository: Annotated[
        str,
        Field(min_length=2, max_length=256, description="ECR repository (created if absent)."),
        grammar(ECR_REPOSITORY, "an ECR repository name"),
    ],
    region: Annotated[
        str, Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$", description="AWS region.")
    ],
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
    existing repo's."""
    options = PushOptions(
        image=image,
        repository=repository,
        region=region,
        tag=tag,
        scan_on_push=scan_on_push,
        immutable_tags=immutable_tags,
        keep_last=keep_last,
        confirm=confirm,
        registry_host=registry_host,
    )
    result = publish(options, progress)
    result.next_step = deploy_step(result.image_uri, result.repository)
    return result


def deploy_step(image_uri: str, repository: str) -> NextStep:
    """The pushed image's next step: a dry run of a Kubernetes job on it (the cluster of
    the current kubeconfig context; the dry run's own next step submits it)."""
    name = re.sub(r"[^a-z0-9-]+", "-", repository.rsplit("/", 1)[-1].lower())
    job_name = (name.strip("-")[:50].strip("-") or "fsdp") + "-train"
    return NextStep(
        tool="deploy_training_job",
        arguments={
            "job_name": job_name,
            "target": "kubernetes",
            "image_uri": image_uri,
            "dry_run": True,
        },
        why="plan a training job on this image (add cluster_name or context for another cluster)",
    )


main = main_for(push_to_ecr)


if __name__ == "__main__":
    main()
