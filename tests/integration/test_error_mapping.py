"""SDK and OS exceptions come out as typed ToolFailures (skills/shared/error_mapping.py).

The exceptions are real: made by real calls against the local services (moto, kmock,
podman), against ports nobody listens on or that never answer, and against the real file
system. Only what those cannot produce is built by hand, in the SDK's real shape, and
says so where it is built."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import socket
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from commands._cli import run_cli
from skills.kube.access import kube_api_client
from skills.shared.error_mapping import failure_from_exception
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.progress import Progress
from skills.shared.results import ToolResult
from skills.shared.tooling import tool
from tests.services._common import free_port

pytestmark = pytest.mark.integration

FAKE_SECRET = "fAkEsEcReT-0123456789-abcdefghij"


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _mapped(exc: BaseException, code: str, exit_status: int) -> ToolFailure:
    """The failure exc maps to, checked for its code, exit status and a hint."""
    failure = failure_from_exception(exc)
    assert failure is not None, f"{type(exc).__module__}.{type(exc).__name__} was not mapped"
    assert failure.code == code, (failure.code, failure.message)
    assert failure.exit_status == exit_status
    assert failure.message.strip() and failure.hint.strip()
    json.dumps(failure.to_dict())  # a CLI --json / MCP result must serialize
    return failure


# --- small servers that misbehave ------------------------------------------------------


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A TCP port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield sock.getsockname()[1]


@pytest.fixture
def closing_port() -> Iterator[int]:
    """A TCP port that reads the request and closes the connection without an answer."""
    stop = threading.Event()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(0.1)

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:  # socket.timeout: look at `stop` again
                continue
            with conn:
                conn.settimeout(1)
                with contextlib.suppress(OSError):
                    conn.recv(65536)

    thread = threading.Thread(target=serve, name="closing-server", daemon=True)
    thread.start()
    try:
        yield sock.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        sock.close()


# --- AWS (botocore, against moto) -------------------------------------------------------


def _ecr(**kwargs: object):
    """An ECR client from a fresh session: nothing cached from another test."""
    import boto3

    return boto3.session.Session().client("ecr", **kwargs)


def test_missing_ecr_repository_is_not_found(moto_server):
    import botocore.exceptions

    with pytest.raises(botocore.exceptions.ClientError) as caught:
        _ecr().describe_repositories(repositoryNames=[_unique("nope")])
    failure = _mapped(caught.value, "not_found", 2)
    assert failure.details == {
        "aws_code": "RepositoryNotFoundException",
        "action": "DescribeRepositories",
    }
    assert "DescribeRepositories" in failure.message


def test_creating_an_ecr_repository_twice_is_a_conflict(moto_server):
    import botocore.exceptions

    ecr, name = _ecr(), _unique("twice")
    ecr.create_repository(repositoryName=name)
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        ecr.create_repository(repositoryName=name)
    failure = _mapped(caught.value, "conflict", 1)
    assert failure.details["aws_code"] == "RepositoryAlreadyExistsException"
    assert failure.details["action"] == "CreateRepository"


def test_no_aws_credentials(moto_server, monkeypatch, tmp_path):
    import botocore.exceptions

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name, file in (
        ("AWS_SHARED_CREDENTIALS_FILE", "credentials"),
        ("AWS_CONFIG_FILE", "config"),
    ):
        (tmp_path / file).write_text("")
        monkeypatch.setenv(name, str(tmp_path / file))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # never ask the network

    with pytest.raises(botocore.exceptions.NoCredentialsError) as caught:
        _ecr().describe_repositories()
    failure = _mapped(caught.value, "no_credentials", 1)
    assert "AWS_PROFILE" in failure.hint


@pytest.mark.parametrize(
    ("server", "exception"),
    [
        ("refused", "EndpointConnectionError"),  # nobody listens on the port
        ("closed", "ConnectionClosedError"),  # the server hangs up without an answer
        ("silent", "ReadTimeoutError"),  # the server never answers
    ],
)
def test_unreachable_aws_endpoint(moto_server, request, server, exception):
    import botocore.exceptions
    from botocore.config import Config

    port = {
        "refused": free_port,
        "closed": lambda: request.getfixturevalue("closing_port"),
        "silent": lambda: request.getfixturevalue("silent_port"),
    }[server]()
    endpoint = f"http://127.0.0.1:{port}"
    config = Config(retries={"max_attempts": 1}, connect_timeout=1, read_timeout=1)
    with pytest.raises(botocore.exceptions.BotoCoreError) as caught:
        _ecr(endpoint_url=endpoint, config=config).describe_repositories()
    assert type(caught.value).__name__ == exception
    failure = _mapped(caught.value, "endpoint_unreachable", 1)
    assert endpoint in failure.message and endpoint in failure.details["endpoint"]


def _client_error(code: str, message: str, status: int, operation: str):
    # moto cannot be made to throttle or to deny: these ClientErrors are built by hand, in
    # the shape botocore's parsers give them (Error.Code/Message, ResponseMetadata status).
    from botocore.exceptions import ClientError

    response = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"RequestId": str(uuid.uuid4()), "HTTPStatusCode": status},
    }
    return ClientError(response, operation)


@pytest.mark.parametrize(
    ("aws_code", "status", "code"),
    [
        ("ThrottlingException", 400, "throttled"),
        ("TooManyRequestsException", 429, "throttled"),
        ("SomethingNew", 429, "throttled"),  # known by its status alone
        ("InternalFailure", 500, "service_error"),
    ],
)
def test_throttling_and_other_aws_errors(aws_code, status, code):
    exc = _client_error(aws_code, "Rate exceeded", status, "DescribeImages")
    failure = _mapped(exc, code, 1)
    assert failure.details == {"aws_code": aws_code, "action": "DescribeImages"}
    assert "Rate exceeded" in failure.message


@pytest.mark.parametrize(
    ("aws_code", "status"),
    [("AccessDeniedException", 400), ("UnauthorizedOperation", 403), ("Forbidden", 403)],
)
def test_aws_access_denied_names_the_action(aws_code, status):
    message = (
        "User: arn:aws:iam::123456789012:user/ci is not authorized to perform: "
        "ecr:CreateRepository on resource: *"
    )
    failure = _mapped(
        _client_error(aws_code, message, status, "CreateRepository"), "access_denied", 1
    )
    assert "CreateRepository" in failure.message
    assert "CreateRepository" in failure.hint
    assert failure.details["action"] == "CreateRepository"


def test_aws_error_text_does_not_leak_the_secret_key(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", FAKE_SECRET)
    message = f"The request signature we calculated does not match (key {FAKE_SECRET})"
    failure = _mapped(
        _client_error("SignatureDoesNotMatch", message, 403, "GetAuthorizationToken"),
        "access_denied",
        1,
    )
    assert FAKE_SECRET not in json.dumps(failure.to_dict())
    assert FAKE_SECRET not in str(failure)
    assert "***" in failure.message


# --- Kubernetes (kubernetes client, against kmock) ----------------------------------------


@pytest.fixture
def core(kube_api):
    from kubernetes import client

    return client.CoreV1Api(kube_api_client())


def test_missing_pod_is_not_found(core):
    from kubernetes.client.exceptions import ApiException

    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod(name=_unique("no-pod"), namespace="default")
    assert caught.value.status == 404
    failure = _mapped(caught.value, "not_found", 2)
    assert failure.details["status"] == 404


@pytest.mark.parametrize("kind", ["namespace", "configmap"])
def test_creating_a_kube_object_twice_is_a_conflict(core, kind):
    from kubernetes.client.exceptions import ApiException

    name = _unique(kind)
    create: Callable[[], object] = {
        "namespace": lambda: core.create_namespace({"metadata": {"name": name}}),
        "configmap": lambda: core.create_namespaced_config_map(
            "default", {"metadata": {"name": name}, "data": {"k": "v"}}
        ),
    }[kind]
    assert create() is not None  # created (201), not answered empty
    with pytest.raises(ApiException) as caught:
        create()
    assert caught.value.status == 409
    _mapped(caught.value, "conflict", 1)


def test_kube_forbidden_is_access_denied(kube_api, core):
    from kubernetes.client.exceptions import ApiException

    name = _unique("forbidden")
    # A real 403 over HTTP: a kmock reaction for this one pod's path only.
    kube_api.emulator[f"get /api/v1/namespaces/default/pods/{name}"] << 403
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod(name=name, namespace="default")
    assert caught.value.status == 403
    failure = _mapped(caught.value, "access_denied", 1)
    assert "kubectl auth can-i" in failure.hint


def _kubeconfig(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "dummy-token"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    return path


def test_unreachable_kube_api_server(tmp_path):
    from kubernetes import client

    core = client.CoreV1Api(kube_api_client(kubeconfig=_kubeconfig(tmp_path, free_port())))
    with pytest.raises(Exception) as caught:  # urllib3's MaxRetryError, after its retries
        core.read_namespace("default", _request_timeout=2)
    assert type(caught.value).__module__.startswith("urllib3")
    failure = _mapped(caught.value, "endpoint_unreachable", 1)
    assert "KUBECONFIG" in failure.hint


def test_kube_api_server_that_never_answers_a_create(tmp_path, silent_port):
    from kubernetes import client

    core = client.CoreV1Api(kube_api_client(kubeconfig=_kubeconfig(tmp_path, silent_port)))
    # A POST is not retried: urllib3 raises its ReadTimeoutError itself, no MaxRetryError.
    with pytest.raises(Exception) as caught:
        core.create_namespace({"metadata": {"name": "late"}}, _request_timeout=1)
    assert type(caught.value).__name__ == "ReadTimeoutError"
    assert type(caught.value).__module__.startswith("urllib3")
    _mapped(caught.value, "endpoint_unreachable", 1)


# --- Docker (docker SDK, against nothing and against podman) -------------------------------


@pytest.mark.parametrize(
    ("version", "exception"),
    [
        (None, "DockerException"),  # version detection fails in the constructor
        ("1.41", "ConnectionError"),  # a fixed version: ping itself fails (requests)
    ],
)
def test_no_docker_engine_is_docker_unavailable(monkeypatch, version, exception):
    import docker

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(Exception) as caught:
        docker.DockerClient(base_url=os.environ["DOCKER_HOST"], version=version, timeout=2).ping()
    assert type(caught.value).__name__ == exception
    failure = _mapped(caught.value, "docker_unavailable", 1)
    assert "DOCKER_HOST" in failure.hint


def test_docker_engine_that_never_answers():
    import docker

    with tempfile.TemporaryDirectory(prefix="em-") as tmp:  # a socket path has <108 bytes
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.bind(f"{tmp}/docker.sock")
            sock.listen(16)
            with pytest.raises(Exception) as caught:
                docker.DockerClient(
                    base_url=f"unix://{tmp}/docker.sock", version="1.41", timeout=1
                ).ping()
    assert type(caught.value).__name__ == "ReadTimeout"  # requests: not a ConnectionError
    _mapped(caught.value, "docker_unavailable", 1)


def test_missing_image_is_not_found(docker_api):
    import docker
    import docker.errors

    client = docker.from_env()
    try:
        with pytest.raises(docker.errors.ImageNotFound) as caught:
            client.images.get("no-such-image:1")
    finally:
        client.close()
    failure = _mapped(caught.value, "not_found", 2)
    assert failure.details["status"] == 404
    assert failure.message.startswith("Docker Engine:")


# --- the operating system (real calls; root bypasses permission bits) ----------------------


def _open_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    open(tmp_path / "file" / "inside")


def _write_to_a_directory(tmp_path: Path) -> None:
    open(tmp_path, "w")


def _open_a_long_name(tmp_path: Path) -> None:
    open(tmp_path / ("a" * 5000))


def _open_a_missing_file(tmp_path: Path) -> None:
    open(tmp_path / "missing.txt")


@pytest.mark.parametrize(
    ("call", "exception", "code", "exit_status"),
    [
        (_open_under_a_file, NotADirectoryError, "not_a_directory", 2),
        (_write_to_a_directory, IsADirectoryError, "is_a_directory", 2),
        (_open_a_long_name, OSError, "name_too_long", 2),
        (_open_a_missing_file, FileNotFoundError, "not_found", 2),
    ],
    ids=["not-a-directory", "is-a-directory", "name-too-long", "missing"],
)
def test_os_errors(tmp_path, call, exception, code, exit_status):
    with pytest.raises(exception) as caught:
        call(tmp_path)
    failure = _mapped(caught.value, code, exit_status)
    assert failure.details["path"].startswith(str(tmp_path))
    assert failure.details["path"] in failure.message


@pytest.mark.parametrize(
    ("number", "code"),
    [
        (errno.ENOSPC, "no_space_left"),  # a full disk cannot be made here without root mounts
        (errno.EACCES, "permission_denied"),  # root ignores permission bits: no real EACCES
    ],
)
def test_os_errors_that_cannot_be_made_here(tmp_path, number, code):
    path = str(tmp_path / "out.bin")
    failure = _mapped(OSError(number, os.strerror(number), path), code, 1)
    assert failure.message == f"{os.strerror(number)}: {path}"
    assert failure.details == {"path": path}


# --- what is not mapped ------------------------------------------------------------------


@pytest.mark.parametrize(
    "exc",
    [ValueError("x"), KeyError("k"), TypeError("t"), ZeroDivisionError(), RuntimeError("r")],
    ids=lambda exc: type(exc).__name__,
)
def test_a_bug_is_not_mapped(exc):
    assert failure_from_exception(exc) is None


def test_a_tool_failure_passes_through():
    failure = ToolFailure(ErrorCode.JOB_RUNNING, "still running", "wait")
    assert failure_from_exception(failure) is failure


# --- through the tool contract -------------------------------------------------------------


class RepositoryFound(ToolResult):
    repository_uri: str


@tool(read_only=True)
def describe_ecr_repository(
    *, repository_name: str = "error-mapping-missing", progress: Progress | None = None
) -> RepositoryFound:
    """Describes one ECR repository (a test tool calling boto3 directly)."""
    import boto3

    ecr = boto3.session.Session().client("ecr")
    repository = ecr.describe_repositories(repositoryNames=[repository_name])["repositories"][0]
    return RepositoryFound(repository_uri=repository["repositoryUri"])


class Parsed(ToolResult):
    value: int


@tool(read_only=True)
def parse_number(*, text: str, progress: Progress | None = None) -> Parsed:
    """Parses an integer without checking it first (a test tool with a bug)."""
    return Parsed(value=int(text))


def test_an_sdk_exception_in_a_tool_comes_out_as_a_tool_failure(moto_server, capsys):
    import botocore.exceptions

    name = _unique("created")
    _ecr().create_repository(repositoryName=name)
    assert describe_ecr_repository(repository_name=name).repository_uri.endswith(f"/{name}")

    with pytest.raises(ToolFailure) as caught:
        describe_ecr_repository(repository_name=_unique("missing"))
    assert caught.value.code == "not_found" and caught.value.exit_status == 2
    assert isinstance(caught.value.__cause__, botocore.exceptions.ClientError)

    capsys.readouterr()
    assert run_cli(describe_ecr_repository, ["--json"]) == 2
    out = capsys.readouterr()
    error = json.loads(out.out)["error"]
    assert error["code"] == "not_found"
    assert error["details"]["action"] == "DescribeRepositories" and error["hint"]
    assert "error [not_found]" in out.err


def test_a_bug_in_a_tool_is_not_dressed_up(capsys):
    with pytest.raises(ValueError):
        parse_number(text="seven")
    with pytest.raises(ValueError):
        run_cli(parse_number, ["--text", "seven", "--json"])
