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


_LOADER: Any = None  # botocore's data loader, shared by every session of this process


def _shared_loader() -> Any:
    """One botocore data loader for the process. Each new Session otherwise gets its own,
    which parses the service's model JSON again (tens of ms per client for EC2/EKS; a tool
    call makes several sessions, the MCP server many). The files never change while the
    process runs; the loader caches what it parsed."""
    global _LOADER
    if _LOADER is None:
        import botocore.loaders

        _LOADER = botocore.loaders.create_loader()
    return _LOADER


def aws_session(profile: str | None = None, region: str | None = None) -> Any:
    """A boto3 Session; profile and region fall back to AWS_PROFILE / AWS_REGION."""
    import boto3
    import botocore.exceptions
    import botocore.session

    region = region or env_region()
    core = botocore.session.get_session()
    try:
        if profile is not None:
            core.set_config_variable("profile", profile)
        # Reads the profile (ProfileNotFound here); a configured data_path gets its own loader.
        shared = core.get_config_variable("data_path") is None
        if shared:
            core.register_component("data_loader", _shared_loader())
        session = boto3.Session(profile_name=profile, region_name=region, botocore_session=core)
        if shared:  # boto3 appends its data path to the loader at each Session: once will do
            paths = _shared_loader().search_paths
            paths[:] = list(dict.fromkeys(paths))
        return session
    except botocore.exceptions.ProfileNotFound as exc:
        raise ToolFailure(
            ErrorCode.AWS_PROFILE_NOT_FOUND,
            f"AWS profile {profile!r} is not configured.",
            "Run `aws configure --profile NAME` or unset AWS_PROFILE.",
        ) from exc


def service_regions(service: str) -> set[str]:
    """The regions botocore's own endpoint data lists for `service`, in every partition
    (no call; the shared loader's parsed files)."""
    session = aws_session()
    return {
        region
        for partition in session.get_available_partitions()
        for region in session.get_available_regions(service, partition_name=partition)
    }


def docker_client() -> Any:
    """A Docker Engine API client from DOCKER_HOST (or the default socket), at the API
    version the daemon names in its /_ping answer, as the docker CLI negotiates. The SDK's
    own negotiation asks /version, which podman answers in about 2 s (it asks dpkg) against
    a fraction of a second for /_ping: every build and push paid it."""
    import docker
    import docker.constants
    import docker.errors
    import requests

    try:
        # At the SDK's minimum a client makes no call; /_ping is unversioned (a daemon
        # refusing old versions still answers it).
        probe = docker.from_env(version=docker.constants.MINIMUM_DOCKER_API_VERSION)
        try:
            answer = probe.api.get(f"{probe.api.base_url}/_ping")
            answer.raise_for_status()
        finally:
            probe.close()
        version = answer.headers.get("Api-Version")  # absent from old daemons: ask /version
        client = docker.from_env(version=version) if version else docker.from_env()
    except (docker.errors.DockerException, requests.RequestException) as exc:
        raise ToolFailure(
            ErrorCode.DOCKER_UNAVAILABLE,
            "Cannot reach a Docker Engine API.",
            "Start Docker (or `podman system service`) and set DOCKER_HOST if it is not the "
            "default socket.",
            {"docker_host": os.environ.get("DOCKER_HOST", "")},
        ) from exc
    return client
