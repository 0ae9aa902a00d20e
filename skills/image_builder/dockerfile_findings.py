"""What the Dockerfile analyzer answers: the versions it resolved, each finding with
its exact fix, and the labels the built image will carry."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class Finding(BaseModel):
    code: str
    severity: Literal["error", "warning"]
    line: int | None
    evidence: str
    explanation: str
    fix: str


class Resolved(BaseModel):
    base_image: str | None
    torch: str | None
    cuda: str | None
    cudnn: str | None
    python: str | None
    flavor: Literal["runtime", "devel"] | None


class Analysis(BaseModel):
    resolved: Resolved
    findings: list[Finding]
    gpu: str | None = None
    driver_version: str | None = None
    # What the built image will say about itself (fsdp-eks.torch/cuda/python): computed
    # from this text, so a base override, a fix or a build arg moves them with the image.
    labels: dict[str, str] = {}

    @property
    def ok(self) -> bool:
        return not any(f.severity == "error" for f in self.findings)


def finding(
    code: str,
    line: int | None,
    evidence: str,
    explanation: str,
    fix: str,
    severity: Literal["error", "warning"] = "error",
) -> Finding:
    return Finding(
        code=code,
        severity=severity,
        line=line,
        evidence=evidence.strip(),
        explanation=explanation,
        fix=fix,
    )
