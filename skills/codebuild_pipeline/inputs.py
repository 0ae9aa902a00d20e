"""Input types shared by the CodeBuild tools (short schema text: agents pay per byte)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field

from skills.cloud.clients import service_regions
from skills.shared.errors import ErrorCode, ToolFailure

_REGION_SHAPE = r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$"


def _known_region(value: str) -> str:
    if not re.fullmatch(_REGION_SHAPE, value):
        raise ValueError("not an AWS region name like us-east-1")
    return value


Region = Annotated[
    str,
    Field(max_length=32, description="AWS region, e.g. us-east-1."),
    AfterValidator(_known_region),
]
ProjectName = Annotated[
    str,
    Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{1,149}$", description="CodeBuild project name."),
]


def check_region(region: str) -> None:
    """An unknown region is the caller's to fix (botocore's own endpoint data, no call)."""
    if region not in service_regions("codebuild"):
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"Unknown region {region!r} for CodeBuild.",
            "Use a region CodeBuild runs in, e.g. us-east-1, eu-west-1.",
            {"problems": [{"field": "region", "problem": "unknown region"}]},
        )
