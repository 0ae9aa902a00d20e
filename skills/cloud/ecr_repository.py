"""The ECR repository side: create or align its settings, and find its newest image.
ensure_repository is the one way a repository is made (push_to_ecr, setup_codebuild)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from skills.cloud.clients import aws_session
from skills.shared.errors import ErrorCode, ToolFailure

DEFAULT_KEEP_LAST = 30


def lifecycle_policy(keep_last: int) -> str:
    """Expire untagged images after a day; keep the newest `keep_last` tagged ones."""
    rules = [
        {
            "rulePriority": 1,
            "description": "expire untagged images",
            "selection": {
                "tagStatus": "untagged",
                "countType": "sinceImagePushed",
                "countUnit": "days",
                "countNumber": 1,
            },
            "action": {"type": "expire"},
        },
        {
            "rulePriority": 2,
            "description": f"keep the last {keep_last} tagged images",
            "selection": {
                "tagStatus": "any",
                "countType": "imageCountMoreThan",
                "countNumber": keep_last,
            },
            "action": {"type": "expire"},
        },
    ]
    return json.dumps({"rules": rules}, sort_keys=True)


@dataclass
class Repository:
    name: str
    uri: str  # <acct>.dkr.ecr.<region>.amazonaws.com/<name>
    scan_on_push: bool
    immutable: bool
    keep_last: int | None
    action: Literal["created", "updated", "unchanged"] = "unchanged"
    changes: list[str] = field(default_factory=list)
    arn: str | None = None  # None only on a dry run's would-be repository


# How ensure_repository makes each write: write(operation, fn, **params) -> fn's answer.
# setup_codebuild's dry run passes one that records the call and returns None.
Write = Callable[..., Any]


def _call(operation: str, fn: Callable[..., Any], **params: Any) -> Any:
    return fn(**params)


def ecr_client(region: str) -> Any:
    return aws_session(region=region).client("ecr")


def _describe(ecr: Any, name: str) -> dict | None:
    try:
        return ecr.describe_repositories(repositoryNames=[name])["repositories"][0]
    except ecr.exceptions.RepositoryNotFoundException:
        return None


def _keep_last_of(policy_text: str | None) -> int | None:
    """Our rule's count in a stored policy (None: no policy, or not ours)."""
    if not policy_text:
        return None
    try:
        for rule in json.loads(policy_text).get("rules", []):
            if rule.get("selection", {}).get("countType") == "imageCountMoreThan":
                return int(rule["selection"]["countNumber"])
    except (ValueError, AttributeError, KeyError, TypeError):
        return None
    return None


def ensure_repository(
    ecr: Any,
    name: str,
    *,
    scan_on_push: bool | None,
    immutable_tags: bool | None,
    keep_last: int | None,
    write: Write = _call,
) -> Repository:
    """Create `name` with the settings and a lifecycle policy, or align an existing one
    with the settings GIVEN (None leaves an existing repository's setting as it is: a
    push never silently turns an immutable repository mutable). A repository created
    concurrently (another push, another setup) between our look and our create is
    aligned instead. Every write goes through `write` (see Write)."""
    found = _describe(ecr, name)
    if found is None:
        scan = True if scan_on_push is None else scan_on_push
        immutable = bool(immutable_tags)
        try:
            created = write(
                "create_repository",
                ecr.create_repository,
                repositoryName=name,
                imageScanningConfiguration={"scanOnPush": scan},
                imageTagMutability="IMMUTABLE" if immutable else "MUTABLE",
            )
        except ecr.exceptions.RepositoryAlreadyExistsException:  # made concurrently
            found = _describe(ecr, name)
            if found is None:  # deleted again in between: the create's error says it
                raise
            return _align(ecr, found, scan_on_push, immutable_tags, keep_last, write)
        keep = keep_last or DEFAULT_KEEP_LAST
        write(
            "put_lifecycle_policy",
            ecr.put_lifecycle_policy,
            repositoryName=name,
            lifecyclePolicyText=lifecycle_policy(keep),
        )
        made = created["repository"] if created else {}  # a dry run made nothing
        return Repository(
            name,
            made.get("repositoryUri", ""),
            scan,
            immutable,
            keep,
            "created",
            ["created", f"scan_on_push={scan}", f"immutable_tags={immutable}", f"keep_last={keep}"],
            made.get("repositoryArn"),
        )
    return _align(ecr, found, scan_on_push, immutable_tags, keep_last, write)


def _align(
    ecr: Any, found: dict, scan_on_push, immutable_tags, keep_last, write: Write = _call
) -> Repository:
    name = found["repositoryName"]
    changes: list[str] = []
    scan = bool(found.get("imageScanningConfiguration", {}).get("scanOnPush"))
    if scan_on_push is not None and scan_on_push != scan:
        write(
            "put_image_scanning_configuration",
            ecr.put_image_scanning_configuration,
            repositoryName=name,
            imageScanningConfiguration={"scanOnPush": scan_on_push},
        )
        scan = scan_on_push
        changes.append(f"scan_on_push={scan}")
    immutable = found.get("imageTagMutability", "MUTABLE").startswith("IMMUTABLE")
    if immutable_tags is not None and immutable_tags != immutable:
        write(
            "put_image_tag_mutability",
            ecr.put_image_tag_mutability,
            repositoryName=name,
            imageTagMutability="IMMUTABLE" if immutable_tags else "MUTABLE",
        )
        immutable = immutable_tags
        changes.append(f"immutable_tags={immutable}")
    try:
        text = ecr.get_lifecycle_policy(repositoryName=name)["lifecyclePolicyText"]
    except ecr.exceptions.LifecyclePolicyNotFoundException:
        text = None
    current = _keep_last_of(text)
    wanted = keep_last if keep_last is not None else (DEFAULT_KEEP_LAST if text is None else None)
    if wanted is not None and (current != wanted or text is None):
        write(
            "put_lifecycle_policy",
            ecr.put_lifecycle_policy,
            repositoryName=name,
            lifecyclePolicyText=lifecycle_policy(wanted),
        )
        current = wanted
        changes.append(f"keep_last={wanted}")
    return Repository(
        name,
        found["repositoryUri"],
        scan,
        immutable,
        current,
        "updated" if changes else "unchanged",
        changes,
        found.get("repositoryArn"),
    )


def latest_image(repository: str, region: str) -> str | None:
    """The newest image of `repository` by push time, as `<uri>:<tag>` (or `@<digest>`
    when it has no tag); None for an empty repository. For deploys that auto-detect
    their image_uri."""
    ecr = ecr_client(region)
    found = _describe(ecr, repository)
    if found is None:
        raise ToolFailure(
            ErrorCode.NOT_FOUND,
            f"ECR repository {repository!r} does not exist in {region}.",
            "Push an image first (push_to_ecr) or pass image_uri.",
        )
    newest: dict | None = None
    for page in ecr.get_paginator("describe_images").paginate(repositoryName=repository):
        for image in page.get("imageDetails", []):
            if newest is None or image["imagePushedAt"] > newest["imagePushedAt"]:
                newest = image
    if newest is None:
        return None
    tags = sorted(newest.get("imageTags") or [])
    uri = found["repositoryUri"]
    return f"{uri}:{tags[0]}" if tags else f"{uri}@{newest['imageDigest']}"


def image_tags(repository: str, region: str) -> list[str]:
    """Every tag in `repository` ([] when it does not exist yet: the first push creates
    it). For semantic versions, which continue from the repository's own tags."""
    ecr = ecr_client(region)
    if _describe(ecr, repository) is None:
        return []
    tags: list[str] = []
    pages = ecr.get_paginator("list_images").paginate(
        repositoryName=repository, filter={"tagStatus": "TAGGED"}
    )
    for page in pages:
        tags += [i["imageTag"] for i in page.get("imageIds", []) if i.get("imageTag")]
    return tags
