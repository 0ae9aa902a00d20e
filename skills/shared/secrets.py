"""Keeps secret values out of results, logs and error text."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

SECRET_ENV_VARS = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "WANDB_API_KEY",
)
MASK = "***"


def secret_values(environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The values of the secret variables set in `environ`. Very short values would
    mask ordinary words; real tokens are long."""
    return tuple(v for name in SECRET_ENV_VARS if len(v := environ.get(name, "")) >= 8)


def redact(text: str, values: Iterable[str] | None = None) -> str:
    """Replace each secret value (None: those of this environment) with ***."""
    for value in secret_values() if values is None else values:
        text = text.replace(value, MASK)
    return text
