"""The confirm gate: a destructive step runs only when the caller said confirm=true.

`Confirm` is the type of every parameter that opens a write (confirm, auto_fix, a
replace): strict, so only a real JSON/Python true counts; "true", "yes", "on" or 1 over
MCP are a caller's mistake, refused as invalid_input, never taken as a yes. A tool gives
its own description: `Annotated[Confirm, Field(description=...)]` (pydantic merges both).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from skills.shared.errors import ErrorCode, ToolFailure

Confirm = Annotated[bool, Field(strict=True)]


def require_confirm(
    confirm: bool,
    what_happens: str,
    to: str = "if that is what you want",
    plan: dict[str, Any] | None = None,
) -> None:
    """Raise `confirmation_required` unless `confirm` is true. `what_happens` says what
    the call would do (one line); `to` finishes the hint ("to scale to zero"); `plan`
    (details) holds the exact change, so the caller can judge before confirming."""
    if confirm:
        return
    # The hint written here, in the call, so tests/unit/test_hint_flags.py checks its flag.
    raise ToolFailure(
        ErrorCode.CONFIRMATION_REQUIRED,
        what_happens,
        f"Call again with confirm=true (CLI: --confirm) {to}.",
        plan,
    )


__all__ = ["Confirm", "require_confirm"]
