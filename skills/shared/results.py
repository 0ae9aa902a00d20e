"""Base for every tool's result: a pydantic model that serializes to JSON."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr

from skills.shared.errors import ToolFailure
from skills.shared.next_step import NextStep


def without_unset(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A list result's items without their unset fields (a list of 100 stays small)."""
    return [{k: v for k, v in item.items() if v not in (None, [], {})} for item in items]


class ToolResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # A picture beside the result (a PNG's file name and bytes; never in the data): MCP
    # sends it as image content, the CLI writes the file and prints its path.
    _image: tuple[str, bytes] | None = PrivateAttr(default=None)

    def attach_image(self, name: str, png: bytes) -> None:
        self._image = (name, png)

    def image(self) -> tuple[str, bytes] | None:
        return self._image

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)

    def summary_rows(self) -> list[tuple[str, Any]]:
        """What a person sees in the CLI; results override this to pick and order fields."""
        return [
            (name, value)
            for name, value in self.model_dump(mode="json").items()
            if value is not None and not isinstance(value, (dict, list))
        ]

    def cli_rows(self) -> list[tuple[str, Any]]:
        """summary_rows, then the next step's one line (the one place its row is made;
        the MCP text writes its own `next:` line)."""
        step = getattr(self, "next_step", None)
        return self.summary_rows() + ([("next", step.text())] if isinstance(step, NextStep) else [])

    def left_out_over_mcp(self) -> set[str] | dict[str, Any]:
        """Fields an MCP result's structuredContent leaves out (pydantic's `exclude`: a
        set of names, or a dict for nested fields): what the caller already has (a
        started job's plan, which its dry run showed), or a list's per-item detail that
        the tool for one item gives in full."""
        return set()

    def compact(self, data: dict[str, Any]) -> dict[str, Any]:
        """The MCP data (model_dump less left_out_over_mcp) made leaner where a field
        cannot say it (the detail of earlier attempts, say); as it is by default."""
        return data

    def plain_text(self) -> str | None:
        """Text the CLI prints as is, instead of the summary table (e.g. a log)."""
        return None

    def failure(self) -> ToolFailure | None:
        """The failure this result reports, if its outcome is one (a failed build, a
        failed job): the MCP server answers such a result with isError=true, and an
        operation whose result it is ends `failed`. None: the work did what was asked."""
        return None

    def cli_exit_status(self) -> int:
        """The CLI's exit status for this result (a failed job is not a success)."""
        return 0
