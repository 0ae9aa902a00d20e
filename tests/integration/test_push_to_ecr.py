"""push_to_ecr on the local stack: moto's ECR (control plane, login token), the
distribution registry with user AWS + moto's token (data plane, through registry_host),
podman's Docker API pushing."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import time
from collections.abc import Iterator

import anyio
import boto3
import pytest
from mcp import Client

from commands._cli import run_cli
from commands.push_to_ecr import push_to_ecr
from mcp_server import build_server
from skills.cloud.ecr_repository import latest_image
from skills.cloud.registry_credentials import RegistryLogin
from skills.ecr_publisher.push import _push
from skills.shared.errors import ToolFailure
from skills.shared.progress import CollectingProgress, NullProgress
from tests.services import registry as registry_service
from tests.services.header_log import header_logging_registry

pytestmark = pytest.mark.integration

ECR_HOST = "123456789012.dkr.ecr.us-east-1.amazonaws.com"
IMAGE = "fsdp:llama32-1b-v1"
MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"


@pytest.fixture(scope="module")
def image(docker_api, tmp_path_factory) -> Iterator[str]:
    """A tiny local image (FROM scratch + a file: no RUN, which podman's API can't run)."""
    context = tmp_path_factory.mktemp("image")
    (context / "weights.bin").write_bytes(b"\x01" * 200_000)
    (context / "Dockerfile").write_text("FROM scratch\nCOPY weights.bin /weights.bin\n")
    out = list(docker_api.client().api.build(path=str(context), tag=IMAGE, decode=True, rm=True))
    assert not [e for e in out if "error" in e or "errorDetail" in e], out
    yield IMAGE


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FSDP_EKS_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            module = importlib.import_module("commands.push_to_ecr")
            status = run_cli(module.push_to_ecr, list(argv))
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 2
    return status, out.getvalue(), err.getvalue()


def _head_digest(registry, repo: str, tag: str) -> str:
    import base64
    import urllib.request

    auth = base64.b64encode(f"{registry.username}:{registry.password}".encode()).decode()
    request = urllib.request.Request(
        f"{registry.url}/v2/{repo}/manifests/{tag}", method="HEAD",
        headers={"Authorization": f"Basic {auth}", "Accept":
                 "application/vnd.oci.image.manifest.v1+json, "
                 "application/vnd.docker.distribution.manifest.v2+json"},
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers["Docker-Content-Digest"]


def test_push_lands_verified_with_repository_settings_and_overwrite_needs_confirm(image, registry):
    progress = CollectingProgress()
    result = push_to_ecr(image=image, repository="team/llama", region="us-east-1",
                         registry_host=registry.host, progress=progress)  # fmt: skip
    assert result.image_uri == f"{ECR_HOST}/team/llama:llama32-1b-v1"
    assert result.image_uri_digest == f"{ECR_HOST}/team/llama@{result.digest}"
    assert result.pushed_to == f"{registry.host}/team/llama:llama32-1b-v1"
    assert result.registry_credentials == "ecr"  # the mapped data plane gets the token
    assert result.digest == _head_digest(registry, "team/llama", "llama32-1b-v1")
    assert registry.tags("team/llama") == ["llama32-1b-v1"]
    assert result.repository_action == "created" and not result.overwrote_tag
    assert result.bytes_pushed >= 200_000 and result.layers >= 1
    assert any(e.total and e.completed > 0 for e in progress.events), progress.events
    ecr = boto3.client("ecr")
    repo = ecr.describe_repositories(repositoryNames=["team/llama"])["repositories"][0]
    assert repo["imageScanningConfiguration"]["scanOnPush"] is True
    assert repo["imageTagMutability"] == "MUTABLE"
    rules = json.loads(ecr.get_lifecycle_policy(repositoryName="team/llama")["lifecyclePolicyText"])
    counts = {
        r["selection"]["tagStatus"]: r["selection"].get("countNumber") for r in rules["rules"]
    }
    assert counts == {"untagged": 1, "any": 30}
    assert "auth-token" not in result.to_json()  # the ECR password never comes back

    with pytest.raises(ToolFailure) as caught:
        push_to_ecr(image=image, repository="team/llama", region="us-east-1",
                    registry_host=registry.host)  # fmt: skip
    assert caught.value.code == "confirmation_required" and "confirm" in caught.value.hint
    again = push_to_ecr(image=image, repository="team/llama", region="us-east-1",
                        registry_host=registry.host, confirm=True, keep_last=5)  # fmt: skip
    assert again.overwrote_tag and again.repository_action == "updated"
    assert again.repository_changes == ["keep_last=5"] and again.digest == result.digest


def test_env_registry_host_over_the_cli_json(image, registry, monkeypatch):
    monkeypatch.setenv("FSDP_EKS_ECR_REGISTRY_HOST", registry.host)
    status, out, err = cli("--image", image, "--repository", "cli-repo", "--region",
                           "us-east-1", "--tag", "v1", "--json")  # fmt: skip
    assert status == 0, err
    body = json.loads(out)
    assert body["image_uri"] == f"{ECR_HOST}/cli-repo:v1"
    assert registry.tags("cli-repo") == ["v1"]


def test_immutable_overwrite_is_a_conflict(image, registry):
    push_to_ecr(image=image, repository="frozen", region="us-east-1", tag="v1",
                immutable_tags=True, registry_host=registry.host)  # fmt: skip
    with pytest.raises(ToolFailure) as caught:
        push_to_ecr(image=image, repository="frozen", region="us-east-1", tag="v1",
                    confirm=True, registry_host=registry.host)  # fmt: skip
    assert caught.value.code == "conflict" and "new tag" in caught.value.hint


def test_a_wrong_token_is_a_typed_error_not_a_silent_success(image, registry, docker_api):
    # Another registry whose password is not moto's token: the login is refused.
    with registry_service.registry_server(password="not-the-ecr-token") as other:
        with pytest.raises(ToolFailure) as caught:
            push_to_ecr(image=image, repository="denied", region="us-east-1",
                        registry_host=other.host)  # fmt: skip
        assert caught.value.code == "access_denied" and caught.value.hint
        assert other.tags("denied") == []
    # The push stream itself: the SDK does not raise, the error entry must be caught.
    client = docker_api.client()
    client.api.tag(image, f"{registry.host}/denied", tag="x")
    with pytest.raises(ToolFailure) as caught:
        _push(client, f"{registry.host}/denied", "x", RegistryLogin("AWS", "wrong-token", "ecr"),
              NullProgress())  # fmt: skip
    assert caught.value.code == "access_denied"
    assert "wrong-token" not in str(caught.value)
    assert registry.tags("denied") == []


def test_the_ecr_token_goes_to_no_host_the_caller_names(image, registry, moto_server):
    """Issue 20 item 1: a header-logging registry named as registry_host got
    `Authorization: Basic AWS:<ECR token>`. Now it is asked anonymously, and the error
    says so; the mapped data plane (FSDP_EKS_ECR_REGISTRY_HOST) still gets the token."""
    token = moto_server.ecr_credentials()[1]
    with header_logging_registry() as fake:
        with pytest.raises(ToolFailure) as caught:
            push_to_ecr(image=image, repository="leak", region="us-east-1",
                        registry_host=fake.host)  # fmt: skip
        assert fake.requests, "the fake registry was not asked at all"
        assert fake.authorizations() == []
        assert not any(token in str(headers) for _, _, headers in fake.requests)
    failure = caught.value
    assert failure.code == "access_denied" and "anonymous" in failure.message
    assert failure.details["registry_credentials"] == "anonymous"
    assert "FSDP_EKS_ECR_REGISTRY_HOST" in failure.hint


@pytest.mark.parametrize(
    ("argv", "code", "status"),
    [
        (["--repository", "Bad_Repo!"], "invalid_input", 2),
        (["--region", "xx-nowhere-1"], "invalid_input", 2),
        (["--image", "absent-image:v0"], "not_found", 2),
        (["--confirm", "--wait_seconds", "x"], "invalid_input", 2),
    ],
)
def test_bad_input_over_the_cli_is_typed_with_a_hint(image, registry, argv, code, status):
    base = {"--image": image, "--repository": "ok-repo", "--region": "us-east-1",
            "--registry_host": registry.host}  # fmt: skip
    for flag, value in zip(argv[::2], argv[1::2], strict=False):
        base[flag] = value
    args = [part for kv in base.items() for part in kv] + [a for a in argv if a == "--confirm"]
    got, out, err = cli(*args, "--json")
    assert got == status, (out, err)
    assert "Traceback" not in out + err
    error = json.loads(out or err)["error"]
    assert error["code"] == code and error["hint"]


def test_no_credentials_is_typed(image, registry, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    got, out, err = cli("--image", image, "--repository", "nocreds", "--region", "us-east-1",
                        "--registry_host", registry.host, "--json")  # fmt: skip
    assert got == 1 and "Traceback" not in out + err
    error = json.loads(out or err)["error"]
    assert error["code"] == "no_credentials" and error["hint"]


def test_bad_input_over_in_process_mcp(image, registry, state_dir):
    async def scenario():
        async with Client(build_server()) as client:
            common = {"image": image, "registry_host": registry.host, "wait_seconds": 30}
            bad_name = await client.call_tool(
                "push_to_ecr", {**common, "repository": "Bad_Repo!", "region": "us-east-1"}
            )
            region = await client.call_tool(
                "push_to_ecr", {**common, "repository": "r1", "region": "xx-nowhere-1"}
            )
            absent = await client.call_tool(
                "push_to_ecr", {**common, "image": "absent:v0", "repository": "r1",
                                "region": "us-east-1"})  # fmt: skip
            return bad_name, region, absent

    bad_name, region, absent = anyio.run(scenario)
    assert bad_name.is_error
    assert json.loads(bad_name.content[0].text)["error"]["code"] == "invalid_input"
    for call, code in ((region, "invalid_input"), (absent, "not_found")):
        state = call.structured_content
        assert state["status"] == "failed" and state["error"]["code"] == code, state
        assert state["error"]["hint"]


def test_latest_image_is_the_newest_by_push_time(moto_server):
    # moto has no registry data plane: record images as ECR's push would (put_image).
    ecr = boto3.client("ecr")
    ecr.create_repository(repositoryName="latest-probe")
    assert latest_image("latest-probe", "us-east-1") is None
    for tag in ("v1", "v2"):
        if tag == "v2":  # moto's imagePushedAt has whole seconds: v2's is the next one
            time.sleep(1.05 - time.time() % 1)
        config = {"digest": f"sha256:{tag * 32}"[:71], "size": 1,
                  "mediaType": "application/vnd.docker.container.image.v1+json"}  # fmt: skip
        manifest = json.dumps({"schemaVersion": 2, "config": config, "layers": [],
                               "mediaType": MANIFEST_V2})  # fmt: skip
        ecr.put_image(repositoryName="latest-probe", imageManifest=manifest, imageTag=tag)
    assert latest_image("latest-probe", "us-east-1") == f"{ECR_HOST}/latest-probe:v2"
    with pytest.raises(ToolFailure) as caught:
        latest_image("no-such-repo", "us-east-1")
    assert caught.value.code == "not_found"


def test_the_seed_call_pushes_the_last_build_to_the_environments_region(
    image, registry, state_dir, tmp_path, monkeypatch
):
    """`push_to_ecr --repository fsdp` as the seed document writes it: the image is the
    one build_image last built in this project, the region AWS_REGION's (issue 32)."""
    from skills.image_builder import last_build

    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("FSDP_EKS_ECR_REGISTRY_HOST", registry.host)
    status, out, err = cli("--repository", "fsdp", "--json")
    assert status == 2 and json.loads(out or err)["error"]["code"] == "invalid_input"
    assert "build_image" in json.loads(out or err)["error"]["hint"]
    last_build.remember(image)  # what build_image records after a build here
    status, out, err = cli("--repository", "fsdp", "--json")
    assert status == 0, err
    assert json.loads(out)["image_uri"] == f"{ECR_HOST}/fsdp:llama32-1b-v1"
    assert registry.tags("fsdp") == ["llama32-1b-v1"]
    monkeypatch.chdir(tmp_path)  # another project: its own last build (none)
    assert cli("--repository", "fsdp", "--json")[0] == 2
