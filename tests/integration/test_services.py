"""Smoke tests: each local service answers its real client, found via the standard env only."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_moto_ecr_through_env(moto_server) -> None:
    import boto3

    ecr = boto3.client("ecr")  # endpoint, credentials and region come from the environment
    assert ecr.meta.endpoint_url == os.environ["AWS_ENDPOINT_URL"] == moto_server.endpoint_url
    repo = ecr.create_repository(repositoryName="smoke")["repository"]
    assert repo["repositoryUri"].endswith("/smoke")
    token = ecr.get_authorization_token()["authorizationData"][0]["authorizationToken"]
    username, _, password = base64.b64decode(token).decode().partition(":")
    assert (username, password) == moto_server.ecr_credentials()

    moto_server.reset()
    assert ecr.describe_repositories()["repositories"] == []


def test_podman_builds_and_pushes_to_registry(docker_api, registry, tmp_path: Path) -> None:
    import boto3
    import docker

    token = boto3.client("ecr").get_authorization_token()["authorizationData"][0]
    username, _, password = base64.b64decode(token["authorizationToken"]).decode().partition(":")

    client = docker.from_env()  # DOCKER_HOST
    assert client.api.base_url.startswith("http+docker://") and client.ping()
    login = client.login(username=username, password=password, registry=registry.host)
    assert "Succeeded" in login.get("Status", ""), login

    (tmp_path / "hello.txt").write_text("hello\n")
    (tmp_path / "Dockerfile").write_text(
        "FROM scratch\nCOPY hello.txt /hello.txt\nLABEL org.example.smoke=yes\n"
    )
    image, _ = client.images.build(path=str(tmp_path), tag=f"{registry.host}/smoke:1", rm=True)
    assert image.labels["org.example.smoke"] == "yes"

    stream = list(client.images.push(f"{registry.host}/smoke", tag="1", stream=True, decode=True))
    errors = [entry for entry in stream if "error" in entry or "errorDetail" in entry]
    assert not errors, errors  # a failed push does not raise in the docker SDK
    assert any("digest: sha256:" in entry.get("status", "") for entry in stream), stream

    assert registry.tags("smoke") == ["1"]  # /v2/smoke/tags/list with basic auth


def test_kmock_pytorchjob_pods_and_logs(kube_api) -> None:
    from kubernetes import client, config

    config.load_kube_config(config_file=os.environ["KUBECONFIG"])
    core, custom = client.CoreV1Api(), client.CustomObjectsApi()

    namespace = core.create_namespace({"metadata": {"name": "smoke"}})
    assert namespace.metadata.name == "smoke" and namespace.metadata.uid
    assert core.read_namespace("smoke").metadata.name == "smoke"

    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "job"},
        "spec": {"pytorchReplicaSpecs": {}},
    }
    group = ("kubeflow.org", "v1", "smoke", "pytorchjobs")
    created = custom.create_namespaced_custom_object(*group, job)
    assert created["metadata"]["namespace"] == "smoke"
    got = custom.get_namespaced_custom_object(*group, "job")
    assert got["spec"] == job["spec"] and got["metadata"]["uid"] == created["metadata"]["uid"]

    assert core.list_namespaced_pod("smoke").items == []  # declared kind: 200, not 404

    # The test plays the training operator: a pod appears, with logs.
    kube_api.emulator.objects["v1/pods", "smoke", "job-master-0"] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "job-master-0", "namespace": "smoke"},
        "status": {"phase": "Running"},
    }
    kube_api.set_pod_log("smoke", "job-master-0", '{"step": 1}\n{"step": 2}\n')
    assert [p.metadata.name for p in core.list_namespaced_pod("smoke").items] == ["job-master-0"]
    log = core.read_namespaced_pod_log("job-master-0", "smoke", tail_lines=1)
    assert log == '{"step": 2}\n'
