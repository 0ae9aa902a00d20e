"""push_to_ecr's result."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from skills.shared.next_step import NextStep
from skills.shared.results import ToolResult


class PushResult(ToolResult):
    image_uri: str  # <acct>.dkr.ecr.<region>.amazonaws.com/<repo>:<tag>
    image_uri_digest: str  # the same @sha256:<digest>
    digest: str
    repository: str
    region: str
    tag: str
    pushed_to: str  # <host>/<repo>:<tag> actually pushed (differs with registry_host)
    # What pushed_to's host was sent: "ecr" (the ECR token), another credential source,
    # or "anonymous" (the credential policy gives a host it does not know nothing).
    registry_credentials: str = "ecr"
    repository_action: Literal["created", "updated", "unchanged"]
    repository_changes: list[str] = Field(default_factory=list)
    scan_on_push: bool
    immutable_tags: bool
    keep_last: int | None = None
    overwrote_tag: bool = False
    layers: int = 0
    bytes_pushed: int = 0
    duration_s: float = 0.0
    next_step: NextStep | None = None

    def summary_rows(self) -> list[tuple[str, Any]]:
        rows: list[tuple[str, Any]] = [
            ("image", self.image_uri),
            ("digest", self.digest),
            ("repository", f"{self.repository} ({self.repository_action})"),
        ]
        if self.pushed_to.split("/", 1)[0] != self.image_uri.split("/", 1)[0]:
            rows.append(("pushed to", self.pushed_to))
        if self.registry_credentials != "ecr":
            rows.append(("credentials", self.registry_credentials))
        rows += [
            ("layers", f"{self.layers}, {self.bytes_pushed / 1e6:.1f} MB"),
            ("duration", f"{self.duration_s:.1f} s"),
        ]
        return rows
