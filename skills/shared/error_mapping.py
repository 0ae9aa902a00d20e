"""Exceptions from the SDKs (botocore, kubernetes, docker) and the OS, mapped to typed
ToolFailures with a hint, in one place. Classes are matched by module and name, so
nothing here imports an SDK: a tool that never touched boto3 never loads it."""

from __future__ import annotations

import errno
from typing import Any

from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.secrets import redact


def _is(exc: BaseException, module_prefix: str, *names: str) -> bool:
    """True if exc is an instance of a class named one of `names` from `module_prefix`."""
    return any(
        cls.__module__.startswith(module_prefix) and cls.__name__ in names
        for cls in type(exc).__mro__
    )


def failure_from_exception(exc: BaseException) -> ToolFailure | None:
    """The typed failure for an exception the user can act on; None for a bug."""
    if isinstance(exc, ToolFailure):
        return exc
    for mapper in (_from_botocore, _from_kubernetes, _from_docker, _from_os, _from_home):
        if (failure := mapper(exc)) is not None:
            return failure
    return None


# --- AWS (botocore) -------------------------------------------------------------

_AWS_DENIED = (
    "AccessDenied",
    "AccessDeniedException",
    "UnauthorizedOperation",
    "UnrecognizedClientException",
    "InvalidClientTokenId",
    "ExpiredToken",
    "ExpiredTokenException",
    "SignatureDoesNotMatch",
)
_AWS_THROTTLED = (
    "Throttling",
    "ThrottlingException",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "SlowDown",
    "ProvisionedThroughputExceededException",
)
_AWS_CONFLICT = (
    "ResourceInUseException",
    "ResourceAlreadyExistsException",
    "RepositoryAlreadyExistsException",
    "EntityAlreadyExists",
    "ConflictException",
    "BucketAlreadyOwnedByYou",
    "ImageAlreadyExistsException",
)


def _from_botocore(exc: BaseException) -> ToolFailure | None:
    if _is(exc, "botocore", "NoCredentialsError", "PartialCredentialsError"):
        return ToolFailure(
            ErrorCode.NO_CREDENTIALS,
            "No AWS credentials were found.",
            "Set AWS_PROFILE (after `aws configure` or `aws sso login`) or "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, then call again.",
        )
    # botocore's ConnectionError: refused, connect timeout, proxy, TLS; its HTTPClientError:
    # read timeout, connection closed or reset mid-request.
    if _is(exc, "botocore", "ConnectionError", "HTTPClientError"):
        endpoint = str(getattr(exc, "kwargs", {}).get("endpoint_url", ""))
        return ToolFailure(
            ErrorCode.ENDPOINT_UNREACHABLE,
            f"Cannot reach the AWS endpoint {endpoint}".rstrip() + ".",
            "Check the network, AWS_REGION and any AWS_ENDPOINT_URL override.",
            {"endpoint": endpoint},
        )
    if not _is(exc, "botocore", "ClientError"):
        return None
    response: dict[str, Any] = getattr(exc, "response", {}) or {}
    error = response.get("Error", {})
    aws_code = str(error.get("Code", ""))
    action = str(getattr(exc, "operation_name", ""))
    message = redact(str(error.get("Message") or aws_code))
    details = {"aws_code": aws_code, "action": action}
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    if aws_code in _AWS_DENIED or status == 403:
        return ToolFailure(
            ErrorCode.ACCESS_DENIED,
            f"AWS denied {action}: {message}",
            f"Grant the caller's IAM identity permission for {action} on that resource "
            "(`aws sts get-caller-identity` shows who is calling).",
            details,
        )
    if aws_code in _AWS_THROTTLED or status == 429:
        return ToolFailure(
            ErrorCode.THROTTLED,
            f"AWS throttled {action}: {message}",
            "Wait a little and call again; lower the request rate if it keeps happening.",
            details,
        )
    if "NotFound" in aws_code or aws_code.startswith("NoSuch") or status == 404:
        return ToolFailure(
            ErrorCode.NOT_FOUND,
            f"{action}: {message}",
            "Check the name and the region (AWS_REGION); list what exists first.",
            details,
        )
    if aws_code in _AWS_CONFLICT or status == 409:
        return ToolFailure(
            ErrorCode.CONFLICT,
            f"{action}: {message}",
            "It exists already or is in use: reuse it, or wait and call again.",
            details,
        )
    return ToolFailure(
        ErrorCode.SERVICE_ERROR,
        f"AWS {action} failed: {aws_code}: {message}",
        "Read the message; call again if it looks transient.",
        details,
    )


# --- Kubernetes -------------------------------------------------------------------


def _from_kubernetes(exc: BaseException) -> ToolFailure | None:
    if _is(exc, "kubernetes", "ApiException"):
        status = getattr(exc, "status", None)
        reason = redact(str(getattr(exc, "reason", "") or ""))
        details = {"status": status, "reason": reason}
        return _from_http_status(
            status,
            f"Kubernetes API: {status} {reason}",
            "Kubernetes",
            details,
            "kubectl auth can-i",
        )
    if _is(exc, "urllib3", "MaxRetryError", "NewConnectionError", "ProtocolError"):
        return ToolFailure(
            ErrorCode.ENDPOINT_UNREACHABLE,
            "Cannot reach the Kubernetes API server.",
            "Check KUBECONFIG and its current context, and that the cluster endpoint is "
            "reachable from here.",
        )
    # After those (urllib3's NewConnectionError is a TimeoutError too): a request that
    # is not retried (a POST) raises urllib3's own read timeout, not MaxRetryError.
    if _is(exc, "urllib3", "TimeoutError"):
        return ToolFailure(
            ErrorCode.ENDPOINT_UNREACHABLE,
            "The Kubernetes API server did not answer in time.",
            "Check that the cluster endpoint in KUBECONFIG is reachable from here and the API "
            "server is healthy, then call again.",
        )
    return None


# --- Docker -----------------------------------------------------------------------


def _from_docker(exc: BaseException) -> ToolFailure | None:
    if _is(exc, "docker", "APIError", "NotFound", "ImageNotFound"):
        status = getattr(exc, "status_code", None)
        explanation = redact(str(getattr(exc, "explanation", "") or exc))
        return _from_http_status(
            status, f"Docker Engine: {explanation}", "Docker", {"status": status}, "docker info"
        )
    if _is(exc, "docker", "DockerException") or _is(exc, "requests", "ConnectionError"):
        return ToolFailure(
            ErrorCode.DOCKER_UNAVAILABLE,
            "Cannot reach a Docker Engine API.",
            "Start Docker (or `podman system service`) and set DOCKER_HOST if it is not the "
            "default socket.",
        )
    if _is(exc, "requests", "Timeout"):  # ReadTimeout is not a ConnectionError
        return ToolFailure(
            ErrorCode.DOCKER_UNAVAILABLE,
            "The Docker Engine API did not answer in time.",
            "Check that Docker (or `podman system service`) at DOCKER_HOST is running and "
            "not stuck, then call again.",
        )
    return None


def _from_http_status(
    status: int | None, message: str, service: str, details: dict[str, Any], check: str
) -> ToolFailure:
    if status in (401, 403):
        code, hint = ErrorCode.ACCESS_DENIED, f"Check the credentials {service} sees (`{check}`)."
    elif status == 404:
        code, hint = ErrorCode.NOT_FOUND, "Check the name (and namespace); list what exists first."
    elif status == 409:
        code, hint = ErrorCode.CONFLICT, "It exists already: reuse it, or delete it first."
    elif status == 429:
        code, hint = ErrorCode.THROTTLED, "Wait a little and call again."
    else:
        code, hint = ErrorCode.SERVICE_ERROR, "Read the message; call again if it looks transient."
    return ToolFailure(code, message, hint, details)


# --- the operating system -----------------------------------------------------------

_OS_ERRORS: dict[int, tuple[ErrorCode, str]] = {
    errno.ENOTDIR: (ErrorCode.NOT_A_DIRECTORY, "Give a directory path, not a file."),
    errno.EISDIR: (ErrorCode.IS_A_DIRECTORY, "Give a file path, not a directory."),
    errno.ENAMETOOLONG: (ErrorCode.NAME_TOO_LONG, "Use a shorter path."),
    errno.EACCES: (ErrorCode.PERMISSION_DENIED, "Use a path this user may write, or fix its mode."),
    errno.EPERM: (ErrorCode.PERMISSION_DENIED, "Use a path this user may write, or fix its mode."),
    errno.EROFS: (ErrorCode.PERMISSION_DENIED, "That file system is read-only: use another path."),
    errno.ENOSPC: (ErrorCode.NO_SPACE_LEFT, "Free space on that disk or use another directory."),
    errno.EDQUOT: (ErrorCode.NO_SPACE_LEFT, "Free space on that disk or use another directory."),
    errno.ENOENT: (ErrorCode.NOT_FOUND, "Check the path."),
}


def _from_home(exc: BaseException) -> ToolFailure | None:
    """pathlib's expanduser() of `~name` for a user this machine does not know (or with
    no HOME) raises RuntimeError; the path is the caller's input."""
    if not (isinstance(exc, RuntimeError) and "home directory" in str(exc)):
        return None
    return ToolFailure(
        ErrorCode.INVALID_INPUT,
        "A path starts with ~ for a home directory this machine cannot find.",
        "Give the path without ~user (absolute, or relative to the current directory).",
    )


def _from_os(exc: BaseException) -> ToolFailure | None:
    if not isinstance(exc, OSError) or exc.errno not in _OS_ERRORS:
        return None
    code, hint = _OS_ERRORS[exc.errno]
    path = redact(str(exc.filename)) if exc.filename is not None else ""
    where = f": {path}" if path else ""
    return ToolFailure(code, f"{exc.strerror}{where}", hint, {"path": path} if path else {})
