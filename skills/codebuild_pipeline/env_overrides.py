"""start_codebuild's `env`: plain values, or references CodeBuild resolves inside the
build (`NAME=ssm:/path` -> PARAMETER_STORE, `NAME=secretsmanager:<arn or name>` ->
SECRETS_MANAGER), so a secret is never sent, stored or shown as plain text. A
secret-named variable (GITHUB_TOKEN, WANDB_API_KEY, *_TOKEN, *_SECRET*, *PASSWORD*,
*_KEY, ...) with a plain value is refused.

What a tool argument may change (issue 45): the names are an allow-list, not a deny-list.
A build's env sets the buildspec's own per-build knobs, and secrets by reference for the
project's own build steps. Anything else (an endpoint, a registry host, a mirror, a proxy,
a CA bundle, an interpreter or loader setting) would send the build's credentials or load
code where the call says, so it belongs to the project's configuration (buildspec.yml,
setup_codebuild), never to one call."""

from __future__ import annotations

from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.secrets import is_secret_name

REFERENCE_TYPES = {"ssm:": "PARAMETER_STORE", "secretsmanager:": "SECRETS_MANAGER"}
# The per-build variables buildspec.yml documents in its header.
BUILD_KNOBS = frozenset(
    {"ECR_REPOSITORY", "PROJECT_NAME", "TEST_LEVEL", "TAG_STRATEGY", "DOCKERFILE"}
)
# The platform's own names: the build's credentials and region, CodeBuild's variables.
RESERVED_PREFIXES = ("AWS_", "CODEBUILD_")


def environment_overrides(env: dict[str, str]) -> list[dict[str, str]]:
    """CodeBuild's environmentVariablesOverride for `env`, each with its type."""
    overrides = []
    _refuse_unknown_names(env)
    for name, value in sorted(env.items()):
        kind, reference = _reference(value)
        if kind is None and is_secret_name(name):
            raise ToolFailure(
                ErrorCode.INVALID_INPUT,
                f"env {name} names a secret; its value would be sent and stored as plain text.",
                # Not `NAME=ref`: text shaped like a named secret is masked in errors.
                f"Store it in SSM Parameter Store or Secrets Manager and give --env {name} a "
                "reference as its value: ssm:/path/to/parameter (PARAMETER_STORE) or "
                "secretsmanager:<secret arn or name> (SECRETS_MANAGER); the project's role "
                "needs read access to it.",
                {"problems": [{"field": f"env.{name}", "problem": "secret as plain text"}]},
            )
        if kind is not None and not reference:
            raise ToolFailure(
                ErrorCode.INVALID_INPUT,
                f"env {name}: the reference {value!r} names no parameter or secret.",
                "Write ssm:/path/to/parameter or secretsmanager:<secret arn or name>.",
                {"problems": [{"field": f"env.{name}", "problem": "empty reference"}]},
            )
        overrides.append({"name": name, "value": reference, "type": kind or "PLAINTEXT"})
    return overrides


def _refuse_unknown_names(env: dict[str, str]) -> None:
    """Every name that is neither a buildspec knob nor a secret passed by reference, in
    one error (names only: values are never echoed)."""
    refused = sorted(
        name
        for name in env
        if name.upper().startswith(RESERVED_PREFIXES)
        or not (name in BUILD_KNOBS or is_secret_name(name))
    )
    if refused:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"env {', '.join(refused)}: not a variable a build's env may set.",
            f"A build's env sets the buildspec's knobs ({', '.join(sorted(BUILD_KNOBS))}) "
            "and secrets by reference (NAME_TOKEN=ssm:/path). Endpoints, registry hosts, "
            "mirrors, proxies and interpreter settings belong to the project's own "
            "configuration: buildspec.yml's env, or setup_codebuild.",
            {"problems": [{"field": f"env.{name}", "problem": "not allowed"} for name in refused]},
        )


def _reference(value: str) -> tuple[str | None, str]:
    """(CodeBuild type, the parameter name or secret id) of a reference; (None, value)
    for a plain value."""
    for prefix, kind in REFERENCE_TYPES.items():
        if value.startswith(prefix):
            return kind, value.removeprefix(prefix).strip()
    return None, value
