"""The Dockerfile reader's limits at, just under and just over each boundary: 1 MiB of
text, 2000 continued lines in one instruction (real Dockerfiles are a few KiB)."""

from __future__ import annotations

import pytest

from skills.image_builder.dockerfile_reader import check_size
from skills.shared.errors import ToolFailure

MIB = 1024 * 1024
HEAD = "FROM ubuntu:22.04\n"


def sized(chars: int) -> str:
    """A Dockerfile of exactly `chars` characters."""
    body = "RUN true\n" * ((chars - len(HEAD)) // 9)
    return HEAD + body + "#" * (chars - len(HEAD) - len(body))


def continued(lines: int) -> str:
    """One RUN continued over `lines` lines (each but the last ends with a backslash)."""
    return HEAD + "RUN pip install \\\n" + "  numpy \\\n" * (lines - 1) + "  x\n"


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        (sized(MIB - 1), False),
        (sized(MIB), False),
        (sized(MIB + 1), True),
        (continued(1999), False),
        (continued(2000), False),
        (continued(2001), True),
    ],
    ids=["1MiB-under", "1MiB-at", "1MiB-over", "2000-under", "2000-at", "2000-over"],
)
def test_a_dockerfile_at_its_limits_is_read_and_one_past_them_refused(text, refused):
    if not refused:
        check_size(text)
        return
    with pytest.raises(ToolFailure) as caught:
        check_size(text)
    assert caught.value.code == "invalid_input" and "limits: 1024 KiB, 2000 lines" in str(
        caught.value.message
    )
