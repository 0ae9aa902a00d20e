"""The tool surface: one module per tool, each holding one @tool function and main().

Importing this package stays light: SDKs (boto3, kubernetes, docker, torch) load
only when a tool runs.
"""

from __future__ import annotations

import importlib

from skills.shared.tooling import ToolSpec, spec_of

TOOL_NAMES = (
    "deploy_training_job",
    "get_training_job",
    "get_training_job_logs",
    "cancel_training_job",
)


def all_tools() -> list[ToolSpec]:
    """Every tool's spec, in TOOL_NAMES order."""
    return [spec_of(getattr(importlib.import_module(f"commands.{n}"), n)) for n in TOOL_NAMES]
