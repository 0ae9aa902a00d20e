"""Results of setup_codebuild, start_codebuild and get_codebuild_build."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.next_step import NextStep
from skills.shared.results import ToolResult

Action = Literal["created", "updated", "unchanged", "would_create", "would_update"]


class PlannedCall(BaseModel):
    """One AWS API call, with its parameters (a write unless `read`)."""

    service: str
    operation: str
    params: dict[str, Any] = Field(default_factory=dict)


class ResourceChange(BaseModel):
    kind: Literal["ecr_repository", "iam_role", "log_group", "codebuild_project", "webhook"]
    name: str
    arn: str | None = None
    action: Action
    changes: list[str] = Field(default_factory=list)  # what differed (updated / would_update)


class PipelineResult(ToolResult):
    status: Literal["created", "updated", "unchanged", "planned"]
    dry_run: bool
    project_name: str
    region: str
    source_type: str
    resources: list[ResourceChange]
    calls: list[PlannedCall] = Field(default_factory=list)  # writes made, or planned
    notes: list[str] = Field(default_factory=list, description="Defaults taken, reads not made.")
    next_step: NextStep | None = None

    def summary_rows(self) -> list[tuple[str, Any]]:
        rows: list[tuple[str, Any]] = [("status", self.status), ("project", self.project_name)]
        rows += [(f"{r.kind} {r.name}", r.action) for r in self.resources]
        rows += [("note", note) for note in self.notes]
        return rows


class BuildPhase(BaseModel):
    name: str
    status: str | None = None
    duration_s: int | None = None


class CodeBuildBuild(ToolResult):
    build_id: str
    project_name: str
    status: str  # IN_PROGRESS | SUCCEEDED | FAILED | FAULT | TIMED_OUT | STOPPED
    current_phase: str | None = None
    complete: bool
    phases: list[BuildPhase] = Field(default_factory=list)
    log_group: str | None = None
    log_stream: str | None = None
    log_tail: list[str] = Field(default_factory=list)
    next_step: NextStep | None = None

    def summary_rows(self) -> list[tuple[str, Any]]:
        rows: list[tuple[str, Any]] = [("build", self.build_id), ("status", self.status)]
        rows += [
            (f"phase {p.name}", f"{p.status or '-'} {p.duration_s or 0}s") for p in self.phases
        ]
        if self.log_tail:
            rows.append(("log", "\n".join(self.log_tail[-20:])))
        return rows

    def failure(self) -> ToolFailure | None:
        if not self.complete or self.status == "SUCCEEDED":
            return None
        return ToolFailure(
            ErrorCode.BUILD_FAILED,
            f"CodeBuild build {self.build_id} ended {self.status}"
            + (f" in phase {self.current_phase}." if self.current_phase else "."),
            "log_tail holds the end of its log; fix the cause and start_codebuild again.",
            {"build_id": self.build_id},
            self.next_step,
        )

    def cli_exit_status(self) -> int:
        return 1 if self.complete and self.status != "SUCCEEDED" else 0
