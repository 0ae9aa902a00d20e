"""The client factories find services through the standard environment only
(AWS_ENDPOINT_URL, DOCKER_HOST, KUBECONFIG), and fail with coded errors and hints."""

from __future__ import annotations

import os

import pytest

from skills.cloud.clients import aws_session, docker_client, service_regions
from skills.kube.access import kube_api_client
from skills.shared.errors import ToolFailure

pytestmark = pytest.mark.integration


def test_aws_session_reaches_the_endpoint_from_the_environment(moto_server):
    ecr = aws_session().client("ecr")
    assert ecr.meta.endpoint_url == moto_server.endpoint_url
    assert ecr.meta.region_name == "us-east-1"
    ecr.create_repository(repositoryName="clients-test")
    names = [r["repositoryName"] for r in ecr.describe_repositories()["repositories"]]
    assert "clients-test" in names


def test_aws_session_region_argument_wins(moto_server):
    assert aws_session(region="eu-west-1").region_name == "eu-west-1"


def test_unknown_aws_profile_is_a_coded_failure(moto_server):
    with pytest.raises(ToolFailure) as caught:
        aws_session(profile="no-such-profile")
    assert caught.value.code == "aws_profile_not_found" and "aws configure" in caught.value.hint


def test_a_services_regions_come_from_botocores_endpoint_data_in_every_partition():
    """One home for "is this a region of service X" (the CodeBuild and ECR tools' checks)."""
    from skills.codebuild_pipeline.inputs import check_region
    from skills.ecr_publisher.push import known_region

    ecr = service_regions("ecr")
    assert {"us-east-1", "eu-west-1", "cn-north-1", "us-gov-west-1"} <= ecr
    assert "xx-nowhere-1" not in ecr and "us-east-1" in service_regions("codebuild")
    for check in (check_region, known_region):
        check("eu-west-1")
        with pytest.raises(ToolFailure) as caught:
            check("xx-nowhere-1")
        assert caught.value.code == "invalid_input", check


def test_docker_client_uses_docker_host(docker_api):
    assert os.environ["DOCKER_HOST"] == docker_api.docker_host
    assert docker_client().ping()


def test_unreachable_docker_is_a_coded_failure(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/nothing.sock")
    with pytest.raises(ToolFailure) as caught:
        docker_client()
    assert caught.value.code == "docker_unavailable"
    assert caught.value.details["docker_host"].endswith("nothing.sock")


def test_kube_client_uses_kubeconfig(kube_api):
    from kubernetes import client

    api = kube_api_client()
    assert api.configuration.host == kube_api.url
    names = [n.metadata.name for n in client.CoreV1Api(api).list_namespace().items]
    assert isinstance(names, list)
    explicit = kube_api_client(kubeconfig=kube_api.kubeconfig, context=kube_api.context)
    assert explicit.configuration.host == kube_api.url


def test_unknown_kube_context_is_a_coded_failure(kube_api):
    with pytest.raises(ToolFailure) as caught:
        kube_api_client(context="no-such-context")
    assert caught.value.code == "kubeconfig_invalid" and "update-kubeconfig" in caught.value.hint


def test_missing_kubeconfig_is_a_coded_failure(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent.yaml"))
    with pytest.raises(ToolFailure) as caught:
        kube_api_client()
    assert caught.value.code == "kubeconfig_invalid"
