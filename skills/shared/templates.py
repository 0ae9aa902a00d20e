"""The jinja2 environment for a folder of YAML templates (manifests): strict about
undefined names, no HTML escaping (every value goes through tojson instead)."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any


@cache
def yaml_templates(folder: Path) -> Any:
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # YAML, not HTML
        keep_trailing_newline=True,
    )
