"""Marks the tool inputs that name local paths, so every rule about paths (where a
target resolves them, where an MCP caller may point them) finds them in one way."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from pydantic import BaseModel


@dataclass(frozen=True)
class LocalPath:
    """A field whose value may be a local path. s3:// URIs are not local paths;
    `hub_name`: the value may also be a Hugging Face hub name (no '/' prefix, not
    starting with '.' or '~', and not an existing path)."""

    hub_name: bool = False


@cache
def path_fields(model: type[BaseModel]) -> dict[str, LocalPath]:
    """The fields of `model` marked LocalPath, in field order."""
    return {
        name: marker
        for name, info in model.model_fields.items()
        for marker in info.metadata
        if isinstance(marker, LocalPath)
    }
