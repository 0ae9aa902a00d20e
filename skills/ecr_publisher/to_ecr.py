"""push_to_ecr's one call: the region the environment names when none is given, the
push (push.publish), and what a pushed image leads to (a dry run of a job on it)."""

from __future__ import annotations

import re

from skills.cloud.clients import default_region
from skills.ecr_publisher.models import PushResult
from skills.ecr_publisher.push import PushOptions, publish
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.next_step import NextStep
from skills.shared.progress import Progress


def push_to_ecr(options: PushOptions, progress: Progress | None = None) -> PushResult:
    result = publish(options, progress)
    result.next_step = deploy_step(result.image_uri, result.repository)
    return result


def configured_region() -> str:
    """The environment's region (AWS_REGION, AWS_DEFAULT_REGION, profile), else
    invalid_input naming the field."""
    region = default_region()
    if region is None:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            "No region given, and none is configured (AWS_REGION, AWS_DEFAULT_REGION, profile).",
            "Pass region (e.g. us-west-2) or set AWS_REGION.",
            {"problems": [{"field": "region", "problem": "missing"}]},
        )
    return region


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
