"""The one error type a user or agent can act on, and the codes it carries."""

from __future__ import annotations

import re
from enum import Enum
from typing import Any

from pydantic import ValidationError

from skills.shared.next_step import NextStep
from skills.shared.secrets import redact

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2


class ErrorCode(str, Enum):
    """Every code a tool raises, with the CLI exit status it maps to: 2 when the caller
    can fix the call itself (bad input, a missing confirm, a name that does not
    exist), 1 when the call was right and the work or the environment failed."""

    exit_status: int  # set per member by __new__

    def __new__(cls, value: str, exit_status: int) -> ErrorCode:
        member = str.__new__(cls, value)
        member._value_ = value
        member.exit_status = exit_status
        return member

    # The caller's input.
    INVALID_INPUT = ("invalid_input", EXIT_BAD_INPUT)
    CONFIRMATION_REQUIRED = ("confirmation_required", EXIT_BAD_INPUT)
    JOB_NOT_FOUND = ("job_not_found", EXIT_BAD_INPUT)
    OPERATION_NOT_FOUND = ("operation_not_found", EXIT_BAD_INPUT)
    UNSUPPORTED_FOR_TARGET = ("unsupported_for_target", EXIT_BAD_INPUT)
    NOT_ENOUGH_GPUS = ("not_enough_gpus", EXIT_BAD_INPUT)
    # The plan's per-GPU memory estimate exceeds the instance's GPU (dry run included).
    GPU_MEMORY_EXCEEDED = ("gpu_memory_exceeded", EXIT_BAD_INPUT)
    # A node's memory cannot hold what the plan puts in it (an async save's staged copy,
    # offloaded states).
    HOST_MEMORY_EXCEEDED = ("host_memory_exceeded", EXIT_BAD_INPUT)
    NOT_FOUND = ("not_found", EXIT_BAD_INPUT)
    AWS_PROFILE_NOT_FOUND = ("aws_profile_not_found", EXIT_BAD_INPUT)
    KUBECONFIG_INVALID = ("kubeconfig_invalid", EXIT_BAD_INPUT)
    NOT_A_DIRECTORY = ("not_a_directory", EXIT_BAD_INPUT)
    IS_A_DIRECTORY = ("is_a_directory", EXIT_BAD_INPUT)
    NAME_TOO_LONG = ("name_too_long", EXIT_BAD_INPUT)
    # A path outside the roots the MCP server lets its callers use.
    PATH_NOT_ALLOWED = ("path_not_allowed", EXIT_BAD_INPUT)
    # A saved pod-doctor snapshot that is not one (not JSON, or the wrong shape).
    SNAPSHOT_INVALID = ("snapshot_invalid", EXIT_BAD_INPUT)
    # A model directory a server cannot load (no config.json, no safetensors weights).
    MODEL_INVALID = ("model_invalid", EXIT_BAD_INPUT)
    # The port a server was asked to listen on is taken on this host.
    PORT_IN_USE = ("port_in_use", EXIT_BAD_INPUT)
    # An object the call would delete, scale or apply over exists and is not this suite's
    # (skills.shared.ownership): nothing was touched; name another, or handle it yourself.
    NOT_OURS = ("not_ours", EXIT_BAD_INPUT)
    # The state of things: the call was right, now is not the time.
    JOB_RUNNING = ("job_running", EXIT_FAILED)
    # A job of that name exists on the cluster (replace=true, or delete it first).
    JOB_EXISTS = ("job_exists", EXIT_FAILED)
    CONFLICT = ("conflict", EXIT_FAILED)
    # A record on disk (a job's) that cannot be read: damaged or edited by hand.
    JOB_RECORD_CORRUPT = ("job_record_corrupt", EXIT_FAILED)
    CANCELLED = ("cancelled", EXIT_FAILED)
    # The environment: credentials, permissions, services, disks.
    NO_CREDENTIALS = ("no_credentials", EXIT_FAILED)
    ACCESS_DENIED = ("access_denied", EXIT_FAILED)
    THROTTLED = ("throttled", EXIT_FAILED)
    ENDPOINT_UNREACHABLE = ("endpoint_unreachable", EXIT_FAILED)
    DOCKER_UNAVAILABLE = ("docker_unavailable", EXIT_FAILED)
    # Slurm's clients missing or its controller unreachable; a refusal names the reason.
    SLURM_UNAVAILABLE = ("slurm_unavailable", EXIT_FAILED)
    SLURM_REJECTED = ("slurm_rejected", EXIT_BAD_INPUT)
    PERMISSION_DENIED = ("permission_denied", EXIT_FAILED)
    NO_SPACE_LEFT = ("no_space_left", EXIT_FAILED)
    TRAINER_NOT_INSTALLED = ("trainer_not_installed", EXIT_FAILED)
    LAUNCH_FAILED = ("launch_failed", EXIT_FAILED)
    # A model server's process ended before it was ready (its log tail says why).
    SERVER_EXITED = ("server_exited", EXIT_FAILED)
    SERVICE_ERROR = ("service_error", EXIT_FAILED)
    OPERATION_FAILED = ("operation_failed", EXIT_FAILED)
    # A result whose outcome is a failure: the image did not build, the job failed.
    BUILD_FAILED = ("build_failed", EXIT_FAILED)
    JOB_FAILED = ("job_failed", EXIT_FAILED)
    SERVER_FAILED = ("server_failed", EXIT_FAILED)
    INTERNAL_ERROR = ("internal_error", EXIT_FAILED)
    # A rendered manifest the CRD schema rejects (a template bug).
    MANIFEST_INVALID = ("manifest_invalid", EXIT_FAILED)
    # The cluster serves no kubeflow.org/v1 PyTorchJob (no Training Operator).
    TRAINING_OPERATOR_MISSING = ("training_operator_missing", EXIT_FAILED)
    # A LoadBalancer Service asked for on a cluster without the AWS Load Balancer Controller.
    LOAD_BALANCER_CONTROLLER_MISSING = ("load_balancer_controller_missing", EXIT_FAILED)
    # The image's CUDA cannot run on the nodes' driver or GPU (the gate before submit).
    CUDA_INCOMPATIBLE = ("cuda_incompatible", EXIT_FAILED)
    # The gate cannot tell the image's CUDA (labels unreadable or absent): skip_gate or rebuild.
    CUDA_UNVERIFIED = ("cuda_unverified", EXIT_FAILED)

    def __str__(self) -> str:
        return self.value


class ToolFailure(Exception):
    """An expected failure: a stable code, a one-line message and what to do next.

    The CLI prints message and hint and exits with the code's status; MCP returns it
    as an isError result. Message, hint and every string in details are masked
    (skills.shared.secrets.redact) whenever they are set, so no way of showing the
    failure (str, args, to_dict, a log of the exception) can carry a secret; message
    and hint are kept to one line of printable text, whatever a caller's input held.
    """

    _MASKED = frozenset({"message", "hint", "details"})
    _ONE_LINE = frozenset({"message", "hint"})

    def __init__(
        self,
        code: ErrorCode | str,
        message: str,
        hint: str = "",
        details: dict[str, Any] | None = None,
        next_step: NextStep | None = None,
    ) -> None:
        known = code if isinstance(code, ErrorCode) else _known(code)
        self.code = str(code)
        self.exit_status = known.exit_status if known else EXIT_FAILED
        self.message = message
        self.hint = hint
        self.details = details or {}
        # A complete call that fixes or gets past this failure, when there is one.
        self.next_step = next_step
        super().__init__(self.message)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self._ONE_LINE and isinstance(value, str):
            value = _one_line(value)
        super().__setattr__(name, _redacted(value) if name in self._MASKED else value)

    def to_dict(self) -> dict[str, Any]:
        return {
            "error": {
                "code": self.code,
                "message": self.message,
                "hint": self.hint,
                "details": self.details,
                **({"next_step": self.next_step.model_dump()} if self.next_step else {}),
            }
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolFailure:
        """The failure `to_dict()` wrote (an operation's recorded error, say)."""
        error = data.get("error", data)
        step = error.get("next_step")
        return cls(
            error["code"],
            error["message"],
            error.get("hint", ""),
            error.get("details"),
            NextStep.model_validate(step) if step else None,
        )

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


# Line breaks and tabs read as a space; any other control character (an escape sequence
# a terminal would obey, NUL) is shown as its \xNN escape.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _one_line(text: str) -> str:
    return _CONTROL.sub(lambda m: " " if m[0] in "\r\n\t" else f"\\x{ord(m[0]):02x}", text)


def _redacted(value: Any) -> Any:
    """`value` with every string in it (keys too, at any depth) masked."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {_redacted(k): _redacted(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_redacted(v) for v in value)
    return value


def _known(code: str) -> ErrorCode | None:
    try:
        return ErrorCode(code)
    except ValueError:
        return None


def invalid_input(exc: ValidationError, what: str) -> ToolFailure:
    """Turn a pydantic ValidationError into a ToolFailure that names each bad field.

    Only field names and pydantic's messages are kept, never the rejected values
    (they may be secrets pasted into the wrong field).
    """
    problems = []
    for err in exc.errors():
        field = ".".join(str(part) for part in err["loc"]) or what
        problems.append({"field": field, "problem": err["msg"]})
    return bad_fields(problems, what)


def bad_fields(problems: list[dict[str, str]], what: str) -> ToolFailure:
    """An invalid_input failure from [{"field", "problem"}, ...]."""
    summary = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
    return ToolFailure(
        code=ErrorCode.INVALID_INPUT,
        message=f"Invalid input for {what}: {summary}",
        hint="Fix the named fields and call again; the tool schema (CLI: --help) gives each "
        "field's rules.",
        details={"problems": problems},
    )


def needs_field(action: str, field: str, hint: str, *, what: str = "") -> ToolFailure:
    """The invalid_input failure of an action called without a field it needs (the one
    spelling of "action=X needs field"); `what` says more about the field."""
    return ToolFailure(
        ErrorCode.INVALID_INPUT,
        f"action={action} needs {field}{what}.",
        hint,
        {"problems": [{"field": field, "problem": f"required for {action}"}]},
    )


def needed(value: str | None, action: str, field: str, hint: str) -> str:
    """`value` when given, else needs_field's failure."""
    if value:
        return value
    raise needs_field(action, field, hint)
