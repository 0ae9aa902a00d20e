"""AWS and Docker client factories. Endpoints come from the standard environment only:
AWS_ENDPOINT_URL(_<SERVICE>) is read by boto3 itself, DOCKER_HOST by the docker SDK.
Heavy SDKs are imported on first use. Kubernetes clients: skills/kube/access.py."""

from __future__ import annotations

import os
from typing import Any

from skills.shared.errors import ErrorCode, ToolFailure


def env_region() -> str | None:
    """The region the standard environment names (AWS_REGION, else AWS_DEFAULT_REGION)."""
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None


def default_region() -> str | None:
    """The region a call without one would use: the environment's, else the profile's
    configured region (None when none is set anywhere)."""
    import botocore.session

    return env_region() or botocore.session.get_session().get_config_variable("region")


def aws_error_code(exc: Exception) -> str:
    """The AWS error code of a botocore ClientError ('' for any other exception)."""
    return str(((getattr(exc, "response", None) or {}).get("Error") or {}).get("Code", ""))


def aws_session(profile: str | None = None, region: str | None = None) -> Any:
    """A boto3 Session; profile and region fall back to AWS_PROFILE / AWS_REGION."""
    import boto3
    import botocore.exceptions

    region = region or env_region()
    try:
        return boto3.Session(profile_name=profile, region_name=region)
    except botocore.exceptions.ProfileNotFound as exc:
        raise ToolFailure(
            ErrorCode.AWS_PROFILE_NOT_FOUND,
            f"AWS profile {profile!r} is not configured.",
            "Run `aws configure --profile NAME` or unset AWS_PROFILE.",
        ) from exc


def docker_client() -> Any:
    """A Docker Engine API client from DOCKER_HOST (or the default socket)."""
    import docker
    import docker.errors

    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as exc:
        raise ToolFailure(
            ErrorCode.DOCKER_UNAVAILABLE,
            "Cannot reach a Docker Engine API.",
            "Start Docker (or `podman system service`) and set DOCKER_HOST if it is not the "
            "default socket.",
            {"docker_host": os.environ.get("DOCKER_HOST", "")},
        ) from exc
    return client
