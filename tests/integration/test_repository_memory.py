"""The ECR repository push_to_ecr / setup_codebuild used is remembered in the tool state
and is the default for a Kubernetes deploy that names no image; ECR_REPOSITORY and
`repository` still win. Real push (podman -> the registry standing in for ECR's data
plane, moto's ECR control plane), deploys planned against kmock."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator

import boto3
import pytest

from commands.deploy_training_job import deploy_training_job
from commands.push_to_ecr import push_to_ecr
from commands.setup_codebuild import setup_codebuild
from skills.operations import remembered
from skills.shared.errors import ToolFailure
from tests.services.training_operator import TrainingOperator

pytestmark = pytest.mark.integration

ECR_HOST = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
LOCAL_IMAGE = "fsdp:remembered-v1"
MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"


@pytest.fixture(scope="module")
def image(docker_api) -> Iterator[str]:
    """A tiny local image (FROM scratch + a file: podman's API cannot RUN)."""
    import tempfile
    from pathlib import Path

    import docker

    with tempfile.TemporaryDirectory() as context:
        (Path(context) / "model.txt").write_text("weights stand-in\n")
        (Path(context) / "Dockerfile").write_text("FROM scratch\nCOPY model.txt /model.txt\n")
        out = list(docker.from_env().api.build(path=context, tag=LOCAL_IMAGE, decode=True))
    assert not [e for e in out if "error" in e or "errorDetail" in e], out
    yield LOCAL_IMAGE


@pytest.fixture
def fresh(tmp_path, monkeypatch, kube_api):
    """Own tool state; no ECR_REPOSITORY; an empty cluster with p5 nodes."""
    monkeypatch.setenv("FSDP_EKS_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("ECR_REPOSITORY", raising=False)
    kube_api.reset()
    TrainingOperator(kube_api).add_nodes("p5.48xlarge", 2)


def _record_in_ecr(repository: str, tag: str) -> None:
    """ECR's own record of a pushed image (moto has no data plane behind the push)."""
    config = {"digest": "sha256:" + hashlib.sha256(tag.encode()).hexdigest(), "size": 1,
              "mediaType": "application/vnd.docker.container.image.v1+json"}  # fmt: skip
    manifest = json.dumps({"schemaVersion": 2, "config": config, "layers": [],
                           "mediaType": MANIFEST_V2})  # fmt: skip
    boto3.client("ecr").put_image(repositoryName=repository, imageManifest=manifest,
                                  imageTag=tag)  # fmt: skip


def _planned_image(**kwargs) -> str:
    planned = deploy_training_job(job_name="remembered", num_nodes=1, gpu_per_node=8,
                                  instance_type="p5.48xlarge", image_uri=None, dry_run=True,
                                  skip_gate=True, **kwargs)  # fmt: skip
    return planned.plan.image_uri


def test_a_deploy_after_a_push_finds_the_pushed_image_without_ecr_repository(
    fresh, image, registry, monkeypatch
):
    with pytest.raises(ToolFailure) as before:
        _planned_image()  # nothing pushed yet: no repository to look in
    assert before.value.code == "invalid_input" and "push_to_ecr" in before.value.hint

    pushed = push_to_ecr(image=image, repository="mem/trainer", region="us-east-1",
                         registry_host=registry.host)  # fmt: skip
    _record_in_ecr("mem/trainer", pushed.tag)
    monkeypatch.delenv("AWS_REGION", raising=False)  # the remembered region is enough
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    assert _planned_image() == pushed.image_uri == f"{ECR_HOST}/mem/trainer:remembered-v1"

    # ECR_REPOSITORY, then `repository`, still win over the remembered one.
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    boto3.client("ecr").create_repository(repositoryName="mem/other")
    _record_in_ecr("mem/other", "v7")
    monkeypatch.setenv("ECR_REPOSITORY", "mem/other")
    assert _planned_image() == f"{ECR_HOST}/mem/other:v7"
    monkeypatch.delenv("ECR_REPOSITORY")
    assert _planned_image(repository="mem/other") == f"{ECR_HOST}/mem/other:v7"
    assert _planned_image() == pushed.image_uri


def test_setup_codebuild_remembers_its_repository_and_a_dry_run_does_not(fresh, moto_server):
    setup_codebuild(project_name="mem-cb", region="us-east-1", ecr_repository="mem/cb",
                    source_url="https://github.com/acme/trainer", dry_run=True)  # fmt: skip
    assert remembered.recall() is None
    setup_codebuild(project_name="mem-cb", region="us-east-1", ecr_repository="mem/cb",
                    source_url="https://github.com/acme/trainer")  # fmt: skip
    last = remembered.recall()
    assert last is not None
    assert (last.repository, last.region, last.recorded_by) == ("mem/cb", "us-east-1",
                                                               "setup_codebuild")  # fmt: skip
    _record_in_ecr("mem/cb", "v0.1.0")  # what the project's first build pushes
    assert _planned_image() == f"{ECR_HOST}/mem/cb:v0.1.0"


def test_a_damaged_record_is_no_default(fresh, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    for text in ("not json", json.dumps({"repository": "../../x", "region": "us-east-1",
                                         "recorded_by": "t", "recorded_at": "t"})):  # fmt: skip
        (state / remembered.FILE_NAME).write_text(text)
        assert remembered.recall() is None
