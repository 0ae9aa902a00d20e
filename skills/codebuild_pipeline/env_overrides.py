"""start_codebuild's `env`: plain values, or references CodeBuild resolves inside the
build (`NAME=ssm:/path` -> PARAMETER_STORE, `NAME=secretsmanager:<arn or name>` ->
SECRETS_MANAGER), so a secret is never sent, stored or shown as plain text. A
secret-named variable (GITHUB_TOKEN, WANDB_API_KEY, *_TOKEN, *_SECRET*, *PASSWORD*,
*_KEY, ...) with a plain value is refused."""

from __future__ import annotations

from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.secrets import is_secret_name

REFERENCE_TYPES = {"ssm:": "PARAMETER_STORE", "secretsmanager:": "SECRETS_MANAGER"}


def environment_overrides(env: dict[str, str]) -> list[dict[str, str]]:
    """CodeBuild's environmentVariablesOverride for `env`, each with its type."""
    overrides = []
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


def _reference(value: str) -> tuple[str | None, str]:
    """(CodeBuild type, the parameter name or secret id) of a reference; (None, value)
    for a plain value."""
    for prefix, kind in REFERENCE_TYPES.items():
        if value.startswith(prefix):
            return kind, value.removeprefix(prefix).strip()
    return None, value
