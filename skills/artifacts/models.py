"""transfer_job_artifacts' result: what was (or, in a dry run, would be) copied where."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from skills.shared.next_step import NextStep
from skills.shared.results import ToolResult

Action = Literal["fetch", "push_to_hub"]
SHOWN = 50  # paths a result lists: a result stays small whatever the folder holds


class TransferResult(ToolResult):
    action: Action
    status: Literal["planned", "done"]
    source: str
    dest: str = Field(description="The local folder, or the Hub repo's URL.")
    files: int = 0
    bytes: int = 0
    overwritten: list[str] = Field(
        default_factory=list, description=f"Local files replaced (the first {SHOWN})."
    )
    overwritten_total: int = 0
    private: bool | None = None  # push_to_hub: the repo's visibility
    commit: str | None = None  # push_to_hub: the commit it made
    plan: dict[str, Any] | None = None  # a dry run's pod (fetch from a claim)
    message: str = ""
    warnings: list[str] = Field(default_factory=list)
    next_step: NextStep | None = None

    def summary_rows(self) -> list[tuple[str, Any]]:
        rows: list[tuple[str, Any]] = [
            ("status", self.status),
            (self.action, f"{self.source} -> {self.dest}"),
            ("files", f"{self.files} ({self.bytes:,} bytes)"),
        ]
        if self.overwritten_total:
            more = self.overwritten_total - min(len(self.overwritten), 10)
            shown = ", ".join(self.overwritten[:10]) + (f" and {more} more" if more else "")
            rows.append(("overwritten", shown))
        if self.private is not None:
            rows.append(("visibility", "private" if self.private else "public"))
        if self.commit:
            rows.append(("commit", self.commit))
        if self.message:
            rows.append(("message", self.message))
        rows += [("warning", w) for w in self.warnings]
        return rows
