"""The jinja2 environment for a folder of YAML templates (manifests): strict about
undefined names, no HTML escaping (every value goes through tojson instead)."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

# JSON writes a character beyond the BMP as a UTF-16 surrogate pair (\ud800\udc00), which
# YAML reads as two lone surrogates (no JSON or UTF-8 writer takes those back): a pair is
# rewritten as YAML's own 8-digit escape of the one character.
_SURROGATE_PAIR = re.compile(r"\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})")


def _pair_as_yaml(match: re.Match[str]) -> str:
    high, low = int(match.group(1), 16), int(match.group(2), 16)
    return f"\\U{0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00):08x}"


def yaml_json(value: Any) -> str:
    """A value as a YAML flow scalar or collection that reads back exactly: JSON (a
    subset of YAML, ASCII only, so no character YAML refuses), its surrogate pairs as
    YAML's \\U escapes; keys sorted, as jinja2's own tojson sorts them."""
    return _SURROGATE_PAIR.sub(_pair_as_yaml, json.dumps(value, sort_keys=True))


@cache
def yaml_templates(folder: Path) -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # YAML, not HTML
        keep_trailing_newline=True,
    )
    env.filters["tojson"] = yaml_json
    return env
