"""Keeps secret values out of results, logs, error text and tool arguments.

Two nets: the values of this environment's secret variables (exact strings), and the
shapes of well-known tokens, which are masked even when the variable is not set here
(a token pasted into a config file, a log line from another host)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

SECRET_ENV_VARS = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "WANDB_API_KEY",
    "DOCKER_PASSWORD",
    "REGISTRY_PASSWORD",
    "CR_PAT",
    "GITHUB_TOKEN",
)
MASK = "***"
MIN_SECRET_LEN = 8

# Whole tokens: the match is masked.
_HF_TOKEN = r"hf_[A-Za-z0-9]{30,}"
# Key ids are exactly 20 characters: the boundaries keep longer upper-case words intact.
_AWS_KEY_ID = r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])"
# GitHub: classic/OAuth/user/server/refresh tokens, and fine-grained personal tokens.
_GITHUB_TOKEN = r"(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"
_TOKENS = re.compile(f"{_HF_TOKEN}|{_AWS_KEY_ID}|{_GITHUB_TOKEN}")
_TOKEN_STARTS = ("hf_", "AKIA", "ASIA", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")
# A named secret: the name stays (it says what was masked), the value goes. Quotes
# around the name or value cover JSON and INI spellings as well as `key = value`.
# Names whose value is a secret wherever it is written (`WANDB_API_KEY=...` in a log,
# `aws_secret_access_key = ...` in a credentials file, `"password": "..."` in JSON).
_SECRET_NAMES = (
    "aws_secret_access_key",
    "aws_session_token",
    "wandb_api_key",
    "github_token",
    "hf_token",
    "hugging_face_hub_token",
    "registry_password",
    "docker_password",
    "password",
)
_NAMED = re.compile(
    rf"""(?ix)
    ( (?: {"|".join(_SECRET_NAMES)} ) ["']? \s* [=:] \s* ["']?
    | authorization ["']? \s* [=:] \s* ["']? (?: bearer | basic ) \s+ )
    [^\s"',]+
    """
)
_NAMED_STARTS = (*_SECRET_NAMES, "authorization")
# What an AWS secret access key looks like on its own: 40 base64 characters.
_AWS_SECRET_KEY = re.compile(r"[A-Za-z0-9/+]{40}")


def secret_values(environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The values of the secret variables set in `environ`. Very short values would
    mask ordinary words; real tokens are long."""
    found = (environ.get(name, "") for name in SECRET_ENV_VARS)
    return tuple(value for value in found if len(value) >= MIN_SECRET_LEN)


def redact(text: str, values: Iterable[str] | None = None) -> str:
    """`text` with every well-known token shape and each secret value (None: those of
    this environment) replaced by ***."""
    # Shapes first: a short value inside a token would otherwise break its shape.
    text = _mask_shapes(text)
    # Longest first: a value that contains another is masked whole.
    for value in sorted(secret_values() if values is None else values, key=len, reverse=True):
        if value:  # "" would match between every two characters
            text = text.replace(value, MASK)
    return text


def _mask_shapes(text: str) -> str:
    # Substring checks first: most log lines hold no token, and the regexes cost more.
    if any(start in text for start in _TOKEN_STARTS):
        text = _TOKENS.sub(MASK, text)
    lowered = text.lower()
    if any(name in lowered for name in _NAMED_STARTS):
        text = _NAMED.sub(rf"\g<1>{MASK}", text)
    return text


def mask_data(value: Any, values: Iterable[str] | None = None) -> Any:
    """`value` (JSON-like: dicts, lists, tuples, strings...) copied with every string,
    keys included, passed through redact: records, argv, next steps and the doctor's
    snapshots go out with the same masking as logs. A loop, not recursion: API objects
    nest deep."""
    found = tuple(secret_values() if values is None else values)
    pending: list[tuple[Any, Any, Any]] = []  # (container, key, item still to copy)
    tuples: list[tuple[Any, Any, list[Any]]] = []  # made as lists, frozen at the end

    def copy(item: Any, parent: Any, key: Any) -> Any:
        if isinstance(item, str):
            return redact(item, found)
        if isinstance(item, Mapping):
            out: dict[Any, Any] = {}
            for k, v in item.items():
                masked = redact(k, found) if isinstance(k, str) else k
                out[masked] = None
                pending.append((out, masked, v))
            return out
        if isinstance(item, (list, tuple)):
            items: list[Any] = [None] * len(item)
            pending.extend((items, i, v) for i, v in enumerate(item))
            if isinstance(item, tuple):
                tuples.append((parent, key, items))
            return items
        return item

    root: list[Any] = [None]
    root[0] = copy(value, root, 0)
    while pending:
        target, key, item = pending.pop()
        target[key] = copy(item, target, key)
    for parent, key, items in reversed(tuples):  # inner ones first
        parent[key] = tuple(items)
    return root[0]


# Environment variable names that hold secrets: a value under one of them is never
# sent or stored as plain text.
_SECRET_NAME = re.compile(
    r"(?i)^(?:.*_TOKEN|.*TOKEN_.*|.*_SECRET.*|SECRET_.*|.*PASSWORD.*|.*PASSWD.*|.*_KEY"
    r"|.*_API_KEY.*|.*_PAT|.*CREDENTIALS?)$"
)


def is_secret_name(name: str) -> bool:
    """Whether an environment variable of this name holds a secret (GITHUB_TOKEN,
    WANDB_API_KEY, *_TOKEN, *_SECRET*, *PASSWORD*, *_KEY, ...)."""
    return name.upper() in SECRET_ENV_VARS or _SECRET_NAME.match(name) is not None


def looks_like_secret(value: str) -> bool:
    """Whether `value` holds a token: a well-known token shape anywhere in it, or the
    whole value shaped like an AWS secret key (40 base64 characters mixing upper and
    lower case and digits; an absolute path is never one)."""
    if _TOKENS.search(value) or _NAMED.search(value):
        return True
    return (
        _AWS_SECRET_KEY.fullmatch(value) is not None
        and not value.startswith("/")
        and any(c.isdigit() for c in value)
        and any(c.isupper() for c in value)
        and any(c.islower() for c in value)
    )


__all__ = [
    "MASK",
    "SECRET_ENV_VARS",
    "is_secret_name",
    "looks_like_secret",
    "mask_data",
    "redact",
    "secret_values",
]
