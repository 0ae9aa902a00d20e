"""build_image's result: every attempt, the image, and the versions it resolves to."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.next_step import NextStep
from skills.shared.results import ToolResult


class Versions(BaseModel):
    base_image: str | None = None
    torch: str | None = None
    cuda: str | None = None
    cudnn: str | None = None
    python: str | None = None
    flavor: str | None = None


class Attempt(BaseModel):
    number: int
    ok: bool
    base_images: list[str] = Field(default_factory=list)
    # Each base image's check: found locally, or the registry's answer and the
    # credentials it was sent (`credentials: anonymous` when the policy gave none).
    base_checks: list[str] = Field(default_factory=list)
    error_class: str | None = None
    message: str | None = None
    evidence: list[str] = Field(default_factory=list)
    fix_applied: list[str] = Field(default_factory=list)
    diff: str | None = None
    fixed_dockerfile: str | None = None
    log_tail: list[str] = Field(default_factory=list)
    duration_s: float = 0.0


class BuildResult(ToolResult):
    status: Literal["built", "failed", "analyzed"]
    dockerfile: str
    image_id: str | None = None
    tags: list[str] = Field(default_factory=list)
    tag_source: str | None = None
    size_bytes: int | None = None
    resolved: Versions = Field(default_factory=Versions)
    # The fsdp-eks.torch/cuda/python labels set on the image: its analysis, not defaults.
    labels: dict[str, str] = Field(default_factory=dict)
    findings: list[dict[str, Any]] = Field(default_factory=list)
    attempts: list[Attempt] = Field(default_factory=list)
    error_class: str | None = None
    hint: str | None = None
    next_step: NextStep | None = None
    # The project had no Dockerfile: this is the trainer image the package ships.
    packaged_trainer: bool = False

    def summary_rows(self) -> list[tuple[str, Any]]:
        where = " (the trainer image fsdp-eks ships: no Dockerfile in the project)"
        shown = self.dockerfile + (where if self.packaged_trainer else "")
        rows: list[tuple[str, Any]] = [("status", self.status), ("dockerfile", shown)]
        if self.image_id:
            rows += [("image", self.image_id[:19]), ("tags", ", ".join(self.tags))]
        if self.size_bytes is not None:
            rows.append(("size", f"{self.size_bytes / 1e6:.1f} MB"))
        versions = self.resolved.model_dump(exclude_none=True)
        if versions:
            rows.append(("resolved", ", ".join(f"{k} {v}" for k, v in versions.items())))
        if self.labels:
            rows.append(("labels", ", ".join(f"{k}={v}" for k, v in self.labels.items())))
        for finding in self.findings:
            where = f" (line {finding['line']})" if finding.get("line") else ""
            rows.append(
                (
                    f"{finding.get('severity', 'finding')} {finding.get('code')}{where}",
                    f"{finding.get('explanation', '')}\nfix: {finding.get('fix', '')}",
                )
            )
        for attempt in self.attempts:
            what = "ok" if attempt.ok else f"failed: {attempt.error_class or 'unclassified'}"
            fixed = f"; fixed: {'; '.join(attempt.fix_applied)}" if attempt.fix_applied else ""
            rows.append((f"attempt {attempt.number}", what + fixed))
        if self.hint:
            rows.append(("hint", self.hint))
        return rows

    def left_out_over_mcp(self) -> set[str] | dict[str, Any]:
        # Each fix writes the whole Dockerfile again (<Dockerfile>.fixed on disk); each
        # attempt's diff says what changed.
        return {"attempts": {"__all__": {"fixed_dockerfile"}}}

    def compact(self, data: dict[str, Any]) -> dict[str, Any]:
        """Over MCP the last attempt keeps its evidence and log tail; the earlier ones say
        what failed (the first evidence line) and what was changed (fix, diff), so ten
        attempts stay one screen each, not ten logs."""
        attempts: list[dict[str, Any]] = data.get("attempts") or []
        brief = [
            {**a, "evidence": a["evidence"][:1], "log_tail": [], "base_checks": []}
            for a in attempts[:-1]
        ]
        return {**data, "attempts": brief + attempts[-1:]}

    def failure(self) -> ToolFailure | None:
        """A build that failed (after every attempt and fix): build_failed, its class and
        hint."""
        if self.status != "failed":
            return None
        last = self.attempts[-1] if self.attempts else None
        said = last.message if last and last.message else "the build failed"
        return ToolFailure(
            ErrorCode.BUILD_FAILED,
            f"{self.dockerfile}: {said}",
            self.hint or "attempts holds each try's evidence and log tail.",
            {"error_class": self.error_class, "attempts": len(self.attempts)},
            self.next_step,
        )

    def cli_exit_status(self) -> int:
        """1 for a failed build, and for an analysis that found errors (so a script or
        CI step can gate on `--analyze_only`)."""
        errors = any(f.get("severity") == "error" for f in self.findings)
        return 1 if self.status == "failed" or (self.status == "analyzed" and errors) else 0
