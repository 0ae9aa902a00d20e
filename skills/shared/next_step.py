"""A next step an agent or a person can take as it is: one tool call, complete.

`arguments` are the tool's own keyword arguments (flat, as the Python function and the
CLI take them: `target="kubernetes", cluster_name="c"`); the MCP server nests them the
way that tool's input schema does before it sends a result. Every required argument is
filled: a next step an agent cannot call as given is a bug (a test validates every
result's next step against the named tool's schema)."""

from __future__ import annotations

import shlex
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_serializer

from skills.shared.secrets import mask_data

# The wait a next step asks for when it follows running work: under every client's
# request timeout (the TypeScript SDK's default is 60 s), so each call returns in time
# and the caller polls again.
POLL_WAIT_S = 30


def command_name(tool: str) -> str:
    """A tool's console script (pyproject [project.scripts]): where the user is, with or
    without a checkout, after `uv tool install` or `make setup`."""
    return tool.replace("_", "-")


class NextStep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tool: str = Field(description="The tool to call next.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Its arguments.")
    why: str = Field(default="", description="What the call does, in a few words.")

    @field_serializer("arguments")
    def _masked(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """A step leaves as logs do: a secret's value inside an argument (a dataset URL
        holding HF_TOKEN's value) is masked; the caller's environment still has it."""
        return mask_data(arguments)

    def cli_line(self) -> str:
        """The same call as a command line (`deploy-training-job --flag value`: the tool's
        console script, which every install puts beside `fsdp-eks-mcp`), secrets masked."""
        argv = [command_name(self.tool)]
        for name, value in mask_data(self.arguments).items():
            argv += _flags(name, value)
        return shlex.join(argv)

    def text(self) -> str:
        """One line for the summary a person reads."""
        return f"{self.why}: {self.cli_line()}" if self.why else self.cli_line()


def _flags(name: str, value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, bool):
        return [f"--{name}" if value else f"--no-{name.replace('_', '-')}"]
    if isinstance(value, (list, tuple)):
        return [part for item in value for part in (f"--{name}", str(item))]
    if isinstance(value, dict):
        return [part for key, item in value.items() for part in (f"--{name}", f"{key}={item}")]
    return [f"--{name}", str(value)]
