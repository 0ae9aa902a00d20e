"""Input checks that stay out of the published schema: a long regex in a `pattern`
costs every agent bytes in tools/list; the same check as a validator costs nothing
there, and its error still names the field."""

from __future__ import annotations

import re

from pydantic import AfterValidator


def grammar(pattern: str, what: str) -> AfterValidator:
    """The value (when given) must match `pattern` in full; else "not <what>"."""
    compiled = re.compile(pattern)

    def check(value: str | None) -> str | None:
        if value is not None and not compiled.fullmatch(value):
            raise ValueError(f"not {what}")
        return value

    return AfterValidator(check)
