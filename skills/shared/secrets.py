"""Keeps secret values out of results, logs and error text."""

from __future__ import annotations

import os

SECRET_ENV_VARS = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "WANDB_API_KEY",
)
MASK = "***"


def redact(text: str) -> str:
    """Replace the value of every secret variable set in this environment with ***."""
    for name in SECRET_ENV_VARS:
        value = os.environ.get(name, "")
        # Very short values would mask ordinary words; real tokens are long.
        if len(value) >= 8:
            text = text.replace(value, MASK)
    return text
