"""SDK and OS exceptions become typed errors with hints (skills/shared/error_mapping.py),
made by real calls against the local services (moto, kmock, podman) and the real file
system wherever those can produce them; a plain bug stays a bug."""

from __future__ import annotations

import errno
import json
import socket

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from skills.shared.cli import run_cli
from skills.shared.error_mapping import failure_from_exception
from skills.shared.errors import ToolFailure
from skills.shared.progress import Progress
from skills.shared.results import ToolResult
from skills.shared.tooling import tool


def _raised(call):
    with pytest.raises(Exception) as caught:
        call()
    failure = failure_from_exception(caught.value)
    assert failure is not None, f"unmapped: {caught.value!r}"
    assert failure.hint
    return failure


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- AWS ------------------------------------------------------------------------------


def test_aws_not_found_and_conflict_from_moto(moto_server):
    ecr = boto3.client("ecr")
    missing = _raised(lambda: ecr.describe_repositories(repositoryNames=["nope"]))
    assert (missing.code, missing.exit_status) == ("not_found", 2)
    assert missing.details["action"] == "DescribeRepositories"
    ecr.create_repository(repositoryName="twice")
    again = _raised(lambda: ecr.create_repository(repositoryName="twice"))
    assert (again.code, again.exit_status) == ("conflict", 1)


def test_aws_without_credentials(monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "empty").write_text("")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "empty"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "empty"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never ask the network
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    sts = boto3.Session().client(
        "sts", region_name="us-east-1", endpoint_url=f"http://127.0.0.1:{_free_port()}"
    )
    failure = _raised(sts.get_caller_identity)
    assert failure.code == "no_credentials" and "AWS_PROFILE" in failure.hint


def test_aws_unreachable_endpoint(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    client = boto3.client(
        "ecr",
        region_name="us-east-1",
        endpoint_url=f"http://127.0.0.1:{_free_port()}",
        config=Config(retries={"max_attempts": 1}, connect_timeout=1),
    )
    failure = _raised(client.describe_repositories)
    assert failure.code == "endpoint_unreachable" and "127.0.0.1" in failure.message


# moto does not throttle or deny: these use botocore's own ClientError with the response
# shape AWS sends, which is what the mapper reads.
@pytest.mark.parametrize(
    ("aws_code", "status", "code"),
    [
        ("ThrottlingException", 400, "throttled"),
        ("AccessDeniedException", 400, "access_denied"),
        ("SomethingNew", 500, "service_error"),
    ],
)
def test_aws_codes_from_the_response(aws_code, status, code, monkeypatch):
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYzzSECRET"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    response = {
        "Error": {"Code": aws_code, "Message": f"no, signed with {secret}"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    failure = failure_from_exception(ClientError(response, "PutImage"))
    assert failure.code == code
    assert secret not in json.dumps(failure.to_dict())
    if code == "access_denied":
        assert "PutImage" in failure.message and "PutImage" in failure.hint


# --- Kubernetes -------------------------------------------------------------------------


def test_kubernetes_not_found_and_conflict_from_kmock(kube_api):
    from kubernetes import client

    from skills.shared.clients import kube_api_client

    core = client.CoreV1Api(kube_api_client())
    missing = _raised(lambda: core.read_namespaced_pod("nope", "default"))
    assert (missing.code, missing.details["status"]) == ("not_found", 404)
    body = {"metadata": {"name": "twice"}, "data": {"a": "b"}}
    core.create_namespaced_config_map("default", body)
    again = _raised(lambda: core.create_namespaced_config_map("default", body))
    assert (again.code, again.details["status"]) == ("conflict", 409)


def test_kubernetes_unreachable_api_server(tmp_path):
    from kubernetes import client, config

    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "gone",
            "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{_free_port()}"}}],
            "contexts": [{"name": "gone", "context": {"cluster": "c", "user": "u"}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
        })
    )  # fmt: skip
    api_config = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=api_config)
    api_config.retries = 0
    core = client.CoreV1Api(client.ApiClient(api_config))
    failure = _raised(lambda: core.list_namespace(_request_timeout=2))
    assert failure.code == "endpoint_unreachable" and "KUBECONFIG" in failure.hint


# --- Docker -----------------------------------------------------------------------------


def test_docker_engine_missing(tmp_path):
    import docker

    failure = _raised(
        lambda: docker.DockerClient(base_url=f"unix://{tmp_path}/no-docker.sock").ping()
    )
    assert failure.code == "docker_unavailable" and "DOCKER_HOST" in failure.hint


def test_docker_image_not_found_from_podman(docker_api):
    import docker

    failure = _raised(lambda: docker.from_env().images.get("no-such-image:1"))
    assert (failure.code, failure.details["status"]) == ("not_found", 404)


# --- the operating system ---------------------------------------------------------------


def test_file_system_errors(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    cases = [
        (lambda: open(afile / "child", "w"), "not_a_directory", 2),  # noqa: SIM115
        (lambda: open(tmp_path, "w"), "is_a_directory", 2),  # noqa: SIM115
        (lambda: (tmp_path / ("n" * 5000)).mkdir(), "name_too_long", 2),
        (lambda: open(tmp_path / "missing"), "not_found", 2),  # noqa: SIM115
    ]
    for call, code, status in cases:
        failure = _raised(call)
        assert (failure.code, failure.exit_status) == (code, status)


# Root (these tests run as root) bypasses permission bits, and filling a disk is not done
# in a test: these two are OSErrors as the kernel reports them.
@pytest.mark.parametrize(
    ("number", "code"), [(errno.ENOSPC, "no_space_left"), (errno.EACCES, "permission_denied")]
)
def test_errno_table(number, code):
    exc = OSError(number, "kernel says no", "/mnt/x")
    failure = failure_from_exception(exc)
    assert failure.code == code and failure.details == {"path": "/mnt/x"}


@pytest.mark.parametrize("bug", [ValueError("x"), KeyError("k"), OSError(errno.EBADF, "bad fd")])
def test_a_bug_is_not_dressed_up_as_a_user_error(bug):
    assert failure_from_exception(bug) is None


# --- through the tool contract ------------------------------------------------------------


class Repos(ToolResult):
    names: list[str]


@tool(read_only=True)
def describe_missing_repository(*, progress: Progress | None = None) -> Repos:
    """Describes a repository that does not exist."""
    found = boto3.client("ecr").describe_repositories(repositoryNames=["absent"])
    return Repos(names=[r["repositoryName"] for r in found["repositories"]])


def test_a_tool_raising_an_sdk_error_gives_a_typed_failure_on_every_surface(moto_server, capsys):
    with pytest.raises(ToolFailure) as caught:
        describe_missing_repository()
    assert caught.value.code == "not_found"
    assert run_cli(describe_missing_repository, ["--json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "not_found"


def test_unmapped_errors_stay_bugs():
    @tool(read_only=True)
    def broken(*, progress: Progress | None = None) -> Repos:
        """Has a bug."""
        raise ZeroDivisionError("oops")

    with pytest.raises(ZeroDivisionError):
        broken()
