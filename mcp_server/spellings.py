"""Spellings of the seed document (the FSDP-on-EKS guide) that no tool lists, taken over
MCP as what they mean, or answered with the exact call to make instead (issue 32). The
CLI takes the same spellings as flags (commands/manage_eks_cluster.py `cli`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from skills.shared.errors import ErrorCode, ToolFailure

# (tool, argument) -> (the value the document gives, what it means). Given that value the
# argument is dropped (the call means the same without it); any other value is refused
# with the call to make.
OLD_SPELLINGS: dict[tuple[str, str], tuple[Any, str]] = {
    ("manage_eks_cluster", "validate_components"): (
        True,
        "validate is the default action, and auto_fix=true validates before it plans fixes",
    ),
}


def translate(tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments with the document's spellings taken out, or ToolFailure naming
    the call to make."""
    out = dict(arguments)
    for (name, argument), (value, meaning) in OLD_SPELLINGS.items():
        if name != tool or argument not in out:
            continue
        given = out.pop(argument)
        if given is not value:
            raise ToolFailure(
                ErrorCode.INVALID_INPUT,
                f"{tool}: {argument}={given!r} is not a setting ({argument}={value!r} is "
                f"accepted: {meaning}).",
                f"Call {tool} with action=describe to read without checks, or leave "
                f"{argument} out: {tool} {out}",
                {"problems": [{"field": argument, "problem": "not a setting"}]},
            )
    return out
