"""Issue 21 items 1-2 on the local stack: build_image labels the image with what it built
(podman's Docker API, read back from the image), push_to_ecr puts it on moto's ECR (the
distribution registry as its data plane, user AWS + moto's token), and the CUDA gate
reads those labels with the ECR token before a deploy to kmock's GPU nodes. The gate's
refusal carries a build_image next step; following it (build, push, deploy) passes.

The project's own Dockerfile is built without its RUN steps (podman here cannot run
containers); its FROM, ARGs and LABELs are the real ones. The pytorch/pytorch bases are
stand-ins (FROM scratch + a file) tagged under the mirror host, present locally."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

from commands.build_image import build_image
from commands.deploy_training_job import deploy_training_job
from commands.push_to_ecr import push_to_ecr
from skills.shared.errors import ToolFailure
from tests.services.training_operator import TrainingOperator

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BASES = (
    "2.13.0-cuda13.0-cudnn9-runtime",
    "2.11.0-cuda12.8-cudnn9-runtime",
    "2.13.0-cuda12.6-cudnn9-runtime",  # the gate's remedy on a 550 driver (issue 51)
    "2.11.0-cuda13.0-cudnn9-runtime",  # the fixer's move from an unpublished 2.11 tag
)
OLD_DRIVER = "550.127.08"  # p4d nodes of an older AMI: no CUDA 13


@pytest.fixture(scope="module")
def mirror(docker_api, registry, tmp_path_factory) -> Iterator[str]:
    """Stand-ins for the pytorch/pytorch bases, as pulled through the mirror host."""
    client = docker_api.client()
    base = tmp_path_factory.mktemp("base")
    (base / "os-release").write_text("stand-in for a pytorch/pytorch image\n")
    (base / "Dockerfile").write_text("FROM scratch\nCOPY os-release /etc/os-release\n")
    for tag in BASES:
        out = list(client.api.build(path=str(base), tag=f"{registry.host}/pytorch/pytorch:{tag}",
                                    decode=True, rm=True))  # fmt: skip
        assert not [e for e in out if "error" in e or "errorDetail" in e], out
    yield registry.host


@pytest.fixture(scope="module")
def no_run_dockerfile(tmp_path_factory) -> Path:
    """The project's Dockerfile less its RUN instructions (continuations included)."""
    text = (ROOT / "Dockerfile").read_text()
    lines = text.split("\n")
    parser = DockerfileParser(fileobj=io.StringIO(text))
    for item in reversed(parser.structure):
        if item["instruction"] in ("RUN", "USER"):  # USER 1000 needs the RUN's useradd
            del lines[item["startline"] : item["endline"] + 1]
    path = tmp_path_factory.mktemp("dockerfile") / "Dockerfile"
    path.write_text("\n".join(lines))
    assert "RUN " not in path.read_text() and "fsdp-eks.cuda=" in path.read_text()
    return path


@pytest.fixture
def operator(kube_api, state_dir) -> TrainingOperator:
    kube_api.reset()
    return TrainingOperator(kube_api)


@pytest.fixture
def state_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("FSDP_EKS_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def build(dockerfile: Path, mirror: str, tag: str, **arguments):
    """build_image with the arguments a next step gives, and where this checkout is."""
    return build_image(dockerfile=str(dockerfile), context=str(ROOT), base_mirror=mirror,
                       repository="fsdp-eks-trainer", tag=tag, **arguments)  # fmt: skip


def image_labels(docker_api, name: str) -> dict[str, str]:
    return docker_api.client().api.inspect_image(name)["Config"]["Labels"] or {}


def deploy(image_uri: str, **kwargs):
    args = {"job_name": "gated", "num_nodes": 2, "gpu_per_node": 8, "image_uri": image_uri,
            "instance_type": "p4d.24xlarge", "max_steps": 6, "wait_seconds": 0}  # fmt: skip
    return deploy_training_job(**(args | kwargs))


def refused(image_uri: str, **kwargs) -> ToolFailure:
    with pytest.raises(ToolFailure) as caught:
        deploy(image_uri, **kwargs)
    return caught.value


def test_build_labels_are_the_images_own_and_move_with_base_image_and_build_args(
    mirror, no_run_dockerfile, state_dir, docker_api
):
    plain = build(no_run_dockerfile, mirror, "labels-plain")
    assert plain.status == "built", plain.attempts
    assert plain.labels == {"fsdp-eks.torch": "2.13.0", "fsdp-eks.cuda": "13.0",
                            "fsdp-eks.efa": "false"}  # fmt: skip
    assert image_labels(docker_api, "fsdp-eks-trainer:labels-plain") | plain.labels == (
        image_labels(docker_api, "fsdp-eks-trainer:labels-plain"))  # fmt: skip
    # --base_image: issue 21 saw 13.0 / 2.13.0 here (the Dockerfile's ARG defaults).
    cu128 = "pytorch/pytorch:" + BASES[1]
    over = build(no_run_dockerfile, mirror, "labels-override", base_image=cu128)
    got = image_labels(docker_api, "fsdp-eks-trainer:labels-override")
    assert over.labels == {"fsdp-eks.torch": "2.11.0", "fsdp-eks.cuda": "12.8",
                           "fsdp-eks.efa": "false"}  # fmt: skip
    assert (got["fsdp-eks.torch"], got["fsdp-eks.cuda"]) == ("2.11.0", "12.8")
    # The same base through the Dockerfile's BASE_IMAGE build arg.
    by_arg = build(no_run_dockerfile, mirror, "labels-arg", build_args={"BASE_IMAGE": cu128})
    got = image_labels(docker_api, "fsdp-eks-trainer:labels-arg")
    assert (got["fsdp-eks.torch"], got["fsdp-eks.cuda"]) == ("2.11.0", "12.8") == (
        by_arg.resolved.torch, by_arg.resolved.cuda)  # fmt: skip


def test_a_fixed_build_is_labelled_as_fixed(mirror, registry, tmp_path, state_dir, monkeypatch,
                                            docker_api):  # fmt: skip
    # The docker config (`docker login`) holds the registry's credentials, so the base
    # check hears the registry's 404 for the missing tag.
    auth = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
    (tmp_path / "config.json").write_text(json.dumps({"auths": {registry.host: {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    # A base tag pytorch never published (2.11 has no CUDA 13.2 build): the fixer moves it
    # to 2.11.0's newest published CUDA, which the mirror holds; the labels follow the
    # fixed text, not the first one.
    dockerfile = tmp_path / "project" / "Dockerfile"
    dockerfile.parent.mkdir()
    dockerfile.write_text("FROM pytorch/pytorch:2.11.0-cuda13.2-cudnn9-runtime\n"
                          'LABEL org.example.role="trainer"\n')  # fmt: skip
    result = build(dockerfile, mirror, "labels-fixed")
    assert result.status == "built", result.attempts
    assert [a.ok for a in result.attempts] == [False, True]
    got = image_labels(docker_api, "fsdp-eks-trainer:labels-fixed")
    assert (got["fsdp-eks.torch"], got["fsdp-eks.cuda"]) == ("2.11.0", "13.0")


def test_the_gate_loop_converges_build_push_deploy(
    mirror, no_run_dockerfile, registry, operator, monkeypatch
):
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    operator.add_nodes("p4d.24xlarge", 2, efa=4, driver=OLD_DRIVER)
    first = build(no_run_dockerfile, mirror, "gate-1")
    pushed = push_to_ecr(image=first.tags[0], repository="gate/trainer", region="us-east-1")
    assert pushed.image_uri.startswith("123456789012.dkr.ecr.us-east-1.amazonaws.com/")

    # The labels are read from ECR (its token, through the data plane): a CUDA refusal,
    # not "cannot read".
    failure = refused(pushed.image_uri)
    assert failure.code == "cuda_incompatible", failure
    assert f"driver {OLD_DRIVER} cannot run CUDA 13.0" in failure.message
    step = failure.next_step
    assert step is not None and step.tool == "build_image"
    assert step.cli_line() in failure.hint
    assert step.arguments["driver_version"] == OLD_DRIVER
    assert step.arguments["instance_type"] == "p4d.24xlarge"
    assert registry.password not in json.dumps(failure.to_dict())

    # Follow it literally: build (its arguments), push, deploy again.
    second = build(no_run_dockerfile, mirror, "gate-2", **step.arguments)
    assert second.status == "built", second.attempts
    assert second.labels["fsdp-eks.cuda"] == step.arguments["base_image"].split("cuda")[1][:4]
    again = push_to_ecr(image=second.tags[0], repository="gate/trainer", region="us-east-1")
    state = deploy(again.image_uri)
    assert state.status == "running"


def test_an_image_the_gate_cannot_verify_is_refused_unless_skip_gate(
    mirror, registry, operator, monkeypatch, tmp_path, docker_api
):
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    operator.add_nodes("p4d.24xlarge", 2, efa=4, driver="580.65.06")
    # An image without the labels (built by hand), pushed to ECR.
    (tmp_path / "Dockerfile").write_text("FROM scratch\nCOPY Dockerfile /Dockerfile\n")
    out = list(docker_api.client().api.build(path=str(tmp_path), tag="unlabelled:v1",
                                             decode=True))  # fmt: skip
    assert not [e for e in out if "error" in e or "errorDetail" in e], out
    pushed = push_to_ecr(image="unlabelled:v1", repository="gate/unlabelled", region="us-east-1")
    no_label = refused(pushed.image_uri)
    assert no_label.code == "cuda_unverified" and "fsdp-eks.cuda" in no_label.message
    assert no_label.next_step is not None and no_label.next_step.tool == "build_image"
    assert "skip_gate=true" in no_label.hint
    # A tag ECR does not have: refused with what to do, not a silent warning.
    missing = refused(pushed.image_uri.rsplit(":", 1)[0] + ":never-pushed")
    assert missing.code == "cuda_unverified" and "404" in missing.message
    assert "push_to_ecr" in missing.hint
    # Another account's ECR: the policy sends it no token (and nothing answers there).
    other = refused("210987654321.dkr.ecr.us-east-1.amazonaws.com/x:v1")
    assert other.code == "cuda_unverified"
    for failure in (no_label, missing, other):  # the ECR token never shows
        assert registry.password not in json.dumps(failure.to_dict())
    # skip_gate=true submits anyway.
    assert deploy(pushed.image_uri, skip_gate=True).status == "running"
