"""The tool surface: one module per tool, each holding one @tool function and main().

The tools are found here, not listed: every public module of this package with a
function of its own name and a `main` is a tool (private modules, `_cli` and the like,
are helpers). The MCP server serves exactly these, and a test proves the console scripts
in pyproject.toml name exactly these. Importing a tool module stays light: SDKs (boto3,
kubernetes, docker, torch) load only when a tool runs.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache
from types import ModuleType

from skills.shared.tooling import ToolSpec, spec_of


def _is_tool(module: ModuleType) -> bool:
    name = module.__name__.rpartition(".")[2]
    return callable(getattr(module, name, None)) and callable(getattr(module, "main", None))


@cache
def tool_names() -> tuple[str, ...]:
    """Every tool in this package, sorted by name."""
    public = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
    return tuple(n for n in public if _is_tool(importlib.import_module(f"{__name__}.{n}")))


def tool_spec(name: str) -> ToolSpec:
    return spec_of(getattr(importlib.import_module(f"{__name__}.{name}"), name))


def all_tools() -> list[ToolSpec]:
    """Every tool's spec, in tool_names() order."""
    return [tool_spec(name) for name in tool_names()]
