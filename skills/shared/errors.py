"""The one error type a user or agent can act on."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError


class ToolFailure(Exception):
    """An expected failure: a stable code, a one-line message and what to do next.

    The CLI prints message and hint and exits non-zero; MCP returns it as an
    isError result. Never put secrets in any field.
    """

    def __init__(
        self, code: str, message: str, hint: str = "", details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint
        self.details = details or {}

    def to_dict(self) -> dict[str, Any]:
        return {
            "error": {
                "code": self.code,
                "message": self.message,
                "hint": self.hint,
                "details": self.details,
            }
        }

    def __str__(self) -> str:
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


def invalid_input(exc: ValidationError, what: str) -> ToolFailure:
    """Turn a pydantic ValidationError into a ToolFailure that names each bad field.

    Only field names and pydantic's messages are kept, never the rejected values
    (they may be secrets pasted into the wrong field).
    """
    problems = []
    for err in exc.errors():
        field = ".".join(str(part) for part in err["loc"]) or what
        problems.append({"field": field, "problem": err["msg"]})
    summary = "; ".join(f"{p['field']}: {p['problem']}" for p in problems)
    return ToolFailure(
        code="invalid_input",
        message=f"Invalid input for {what}: {summary}",
        hint="Fix the named fields and call again; the tool schema (CLI: --help) gives each "
        "field's rules.",
        details={"problems": problems},
    )
