"""Client factories. Endpoints come from the standard environment only:
AWS_ENDPOINT_URL(_<SERVICE>) is read by boto3 itself, DOCKER_HOST by the docker
SDK, KUBECONFIG by the kubernetes client. Heavy SDKs are imported on first use."""

from __future__ import annotations

import os
from typing import Any

from skills.shared.errors import ErrorCode, ToolFailure


def aws_session(profile: str | None = None, region: str | None = None) -> Any:
    """A boto3 Session; profile and region fall back to AWS_PROFILE / AWS_REGION."""
    import boto3
    import botocore.exceptions

    region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
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


def kube_api_client(
    kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None
) -> Any:
    """A kubernetes ApiClient from a kubeconfig path (default: KUBECONFIG) and context."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    path = os.fspath(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG") or None
    try:
        api_config = client.Configuration()
        config.load_kube_config(config_file=path, context=context, client_configuration=api_config)
    except (ConfigException, FileNotFoundError) as exc:
        raise ToolFailure(
            ErrorCode.KUBECONFIG_INVALID,
            f"Cannot load kubeconfig{f' context {context!r}' if context else ''}.",
            "Run `aws eks update-kubeconfig --name CLUSTER` or set KUBECONFIG.",
            {"kubeconfig": path or "~/.kube/config"},
        ) from exc
    return client.ApiClient(api_config)


def cluster_api_client(
    cluster_name: str | None = None,
    region: str | None = None,
    profile: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
) -> Any:
    """A cluster's ApiClient: an explicit kubeconfig/context wins (any cluster, a proxy,
    a test API); else the EKS cluster by name (its token in memory, no aws CLI); else
    KUBECONFIG's current context."""
    if kubeconfig or context or not cluster_name:
        return kube_api_client(kubeconfig, context)
    from skills.eks_cluster_manager.access import eks_api_client

    return eks_api_client(cluster_name, region, profile)
