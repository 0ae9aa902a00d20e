"""The tool surface: one module per tool, each holding one @tool function and main().

TOOL_NAMES is the one list of tools: the MCP server serves it, and a test proves the
console scripts in pyproject.toml name exactly these. Importing this package stays
light: SDKs (boto3, kubernetes, docker, torch) load only when a tool runs.
"""

from __future__ import annotations

import importlib

from skills.shared.tooling import ToolSpec, spec_of

TOOL_NAMES = (
    "deploy_training_job",
    "get_training_job",
    "get_training_job_logs",
    "diagnose_training_job",
    "list_training_jobs",
    "cancel_training_job",
    "delete_training_job",
    "get_operation",
    "list_operations",
    "cancel_operation",
    "build_image",
    "setup_codebuild",
    "start_codebuild",
    "get_codebuild_build",
    "push_to_ecr",
    "manage_eks_cluster",
)


def tool_spec(name: str) -> ToolSpec:
    return spec_of(getattr(importlib.import_module(f"commands.{name}"), name))


def all_tools() -> list[ToolSpec]:
    """Every tool's spec, in TOOL_NAMES order."""
    return [tool_spec(name) for name in TOOL_NAMES]
