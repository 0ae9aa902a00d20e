"""Tool names other documents use (the FSDP-on-EKS guide's `build_docker_image(...)` and
`push_image.py`), answered with the exact call to make instead: a redirect in the
error (its next_step the new tool with the arguments mapped), never a tool of its own,
so tools/list stays the suite's. The MCP server answers an unknown tool name through
`redirect`; the console scripts of the old names (pyproject.toml) through `main_for`."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from commands._cli import print_failure
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.next_step import NextStep


@dataclass(frozen=True)
class Renamed:
    """An old tool: the tool that does its work now, and its arguments' new names."""

    tool: str
    arguments: Mapping[str, str]


RENAMED: dict[str, Renamed] = {
    "build_docker_image": Renamed(
        "build_image",
        {
            "dockerfile": "dockerfile",
            "dockerfile_path": "dockerfile",
            "context": "context",
            "build_context": "context",
            "context_path": "context",
            "tag": "tag",
            "image_tag": "tag",
            "repository": "repository",
            "image_name": "repository",
            "repository_name": "repository",
            "build_args": "build_args",
            "base_image": "base_image",
        },
    ),
    "push_image": Renamed(
        "push_to_ecr",
        {
            "image": "image",
            "local_image": "image",
            "image_uri": "image",
            "repository": "repository",
            "ecr_repository": "repository",
            "repository_name": "repository",
            "repo_name": "repository",
            "region": "region",
            "aws_region": "region",
            "tag": "tag",
            "image_tag": "tag",
        },
    ),
}
# What each new tool cannot be called without (a next step is complete or not given).
_REQUIRED = {"push_to_ecr": ("repository",)}


def old_name(name: str) -> str | None:
    """The RENAMED key `name` spells (push_image.py, build-docker-image), or None."""
    key = name.removesuffix(".py").replace("-", "_")
    return key if key in RENAMED else None


def redirect(name: str, arguments: Mapping[str, Any], cli: bool = False) -> ToolFailure | None:
    """The failure that answers old tool `name` (None: not an old name): its new tool,
    the arguments it keeps under their new names, and those it drops."""
    key = old_name(name)
    if key is None:
        return None
    renamed = RENAMED[key]
    mapped = {renamed.arguments[k]: v for k, v in arguments.items() if k in renamed.arguments}
    dropped = sorted(k for k in arguments if k not in renamed.arguments)
    missing = [r for r in _REQUIRED.get(renamed.tool, ()) if r not in mapped]
    step = NextStep(tool=renamed.tool, arguments=mapped, why=f"what {name} did")
    call = (
        step.cli_line()
        if cli
        else f"{renamed.tool}({', '.join(f'{k}={v!r}' for k, v in mapped.items())})"
    )
    return ToolFailure(
        ErrorCode.INVALID_INPUT,
        f"{name} is not a tool here: {renamed.tool} does its work"
        + (f" ({', '.join(dropped)} not taken)" if dropped else "")
        + ".",
        f"Call {call}" + (f", adding {', '.join(missing)}" if missing else "") + ".",
        {"renamed_to": renamed.tool, "dropped": dropped, "missing": missing},
        next_step=None if missing else step,
    )


def cli_arguments(argv: Sequence[str]) -> dict[str, Any]:
    """`--name value`, `--name=value` and a bare `--flag` (true) as arguments."""
    arguments: dict[str, Any] = {}
    args = list(argv)
    while args:
        arg = args.pop(0)
        if not arg.startswith("--") or arg == "--json":
            continue
        name, eq, value = arg[2:].partition("=")
        if not eq:
            value = args.pop(0) if args and not args[0].startswith("--") else True
        arguments[name.replace("-", "_")] = value
    return arguments


def main_for(name: str) -> Callable[[Sequence[str] | None], None]:
    """The console script of an old name: prints the redirect and exits 2."""

    def main(argv: Sequence[str] | None = None) -> None:
        argv = list(sys.argv[1:] if argv is None else argv)
        failure = redirect(name, cli_arguments(argv), cli=True)
        assert failure is not None, f"{name} is not in RENAMED"
        print_failure(failure, as_json="--json" in argv)
        raise SystemExit(failure.exit_status)

    return main


build_docker_image = main_for("build_docker_image")
push_image = main_for("push_image.py")
