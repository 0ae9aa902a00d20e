"""The interface every model-server target implements (local `transformers serve`,
vLLM on Kubernetes), in the shape of the job targets: plan -> deploy (exactly the
plan) -> get/list -> scale -> delete. A target is one module with a settings model
(`target: Literal["<name>"]`) and a `ServerTarget` subclass, added in targets_by_name.py."""

from __future__ import annotations

import shlex
from abc import ABC, abstractmethod
from typing import Annotated, Any, ClassVar, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from skills.catalog.pricing import Billing, cost_rows
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.next_step import NextStep
from skills.shared.paging import Page
from skills.shared.paths import LocalPath
from skills.shared.progress import Progress
from skills.shared.results import ToolResult

# A server's name: a DNS-1035 label, so it is also a Kubernetes Service name.
ServerName = Annotated[
    str,
    Field(
        pattern=r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$",
        description="Server name (lowercase letters, digits, '-').",
    ),
]
# What to serve: an exported model directory (trainer.export), s3:// or a hub name.
ModelSource = Annotated[
    str,
    Field(
        min_length=1,
        max_length=4096,
        pattern=r"^[^\x00-\x1f\x7f]+$",
        description="Export folder, s3:// URI or hub name.",
    ),
    LocalPath(hub_name=True, s3=True, writable=False, where_job_runs=True),
]

ServerStatus = Literal["planned", "starting", "ready", "failed", "stopped", "deleted"]


class ServerSettings(BaseModel):
    """Where and how a model is served. Each target's subclass has a
    `target: Literal["<name>"]` field, which tells the settings apart."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerPlan(BaseModel):
    """Exactly what deploy will do, as data (a dry run shows it)."""

    name: str
    model: str
    target: str
    objects: list[dict[str, Any]] = Field(default_factory=list)  # what is applied/started
    argv: list[str] = Field(default_factory=list)  # the server's command line
    warnings: list[str] = Field(default_factory=list)  # who can reach it, what is missing

    def summary_rows(self) -> list[tuple[str, Any]]:
        """The plan in a line or two (--json has every object in full)."""
        named = [
            f"{o['kind']} "
            + "/".join(
                filter(None, (o.get("metadata", {}).get(k, "") for k in ("namespace", "name")))
            )
            for o in self.objects
            if "kind" in o
        ]
        rows: list[tuple[str, Any]] = []
        if named:
            rows.append(("objects", ", ".join(named) + " (in full: --json)"))
        if self.argv:
            rows.append(("argv", shlex.join(self.argv)))
        rows += [("warning", w) for w in self.warnings]
        return rows


class ServerState(ToolResult):
    """One model server as the tools report it."""

    name: str
    target: str
    status: ServerStatus
    model: str = ""
    endpoint: str | None = None  # the OpenAI-compatible base URL (…/v1 is under it)
    replicas: int | None = None
    ready_replicas: int | None = None
    curl: str | None = None  # one smoke request a person can paste
    smoke: str | None = None  # what the smoke request answered (a short excerpt)
    message: str = ""
    plan: ServerPlan | None = None  # dry runs (and include_plan)
    cost: dict[str, Any] | None = None  # the estimate of skills/catalog/pricing.py
    next_step: NextStep | None = None

    def summary_rows(self) -> list[tuple[str, Any]]:
        rows = super().summary_rows()
        if self.plan is not None:
            rows += self.plan.summary_rows()
        rows += cost_rows(self.cost)
        return rows

    def failure(self) -> ToolFailure | None:
        """A server that failed (its rollout, its smoke request) is a failed call."""
        if self.status != "failed":
            return None
        return ToolFailure(
            ErrorCode.SERVER_FAILED,
            f"Model server {self.name!r} failed: {self.message or 'see get_model_server'}",
            "Fix what the message names (model source, image, GPUs), then deploy again; "
            "get_model_server shows what its pods wait for.",
            {"name": self.name, "target": self.target},
            self.next_step,
        )

    def cli_exit_status(self) -> int:
        return 1 if self.status == "failed" else 0


# The one smoke request every server target sends (and its curl line shows): an
# OpenAI-style chat completion; a plain completion for a model without a chat template.
SMOKE_PROMPT = "Say hello in one short sentence."
SMOKE_MAX_TOKENS = 16


def smoke_chat(model: str) -> dict[str, Any]:
    """POST /v1/chat/completions's body."""
    messages = [{"role": "user", "content": SMOKE_PROMPT}]
    return {"model": model, "messages": messages, "max_tokens": SMOKE_MAX_TOKENS}


def smoke_completion(model: str) -> dict[str, Any]:
    """POST /v1/completions's body (a model with no chat template)."""
    return {"model": model, "prompt": SMOKE_PROMPT, "max_tokens": SMOKE_MAX_TOKENS}


S = TypeVar("S", bound=ServerSettings)
A = TypeVar("A", bound=ServerSettings)


class ServerTarget(ABC, Generic[S, A]):
    """S: the settings deploy takes; A: the part of them that reaches the target (what
    get, list and delete take)."""

    name: ClassVar[str]

    @abstractmethod
    def plan(self, name: str, model: str, settings: S) -> ServerPlan: ...

    @abstractmethod
    def deploy(
        self, plan: ServerPlan, settings: S, progress: Progress, wait_seconds: float | None
    ) -> ServerState:
        """Start exactly `plan`, follow it to ready (or the wait's end), smoke-test it."""

    def require_startable(self, settings: S) -> None:
        """Refuse a start the caller has not confirmed (before any work: an agent's
        start runs on as an operation). Nothing to confirm by default."""

    def billing(self, settings: S) -> Billing | None:
        """The instances deploy would run, for the dry run's cost; None when nothing is
        billed (this host)."""
        del settings
        return None

    @abstractmethod
    def get(self, name: str, settings: A) -> ServerState: ...

    @abstractmethod
    def list(
        self, settings: A, limit: int | None = None, cursor: str | None = None
    ) -> Page[ServerState]:
        """The servers by name, `limit` of them (None: all) after the `cursor` (a
        skills.shared.paging cursor), only those described, and how many are past them."""

    @abstractmethod
    def delete(self, name: str, settings: A) -> ServerState: ...

    def scale(self, name: str, replicas: int, settings: S) -> ServerState:
        raise ToolFailure(
            ErrorCode.UNSUPPORTED_FOR_TARGET,
            f"Target {self.name!r} serves one replica; it cannot scale.",
            "Use target 'kubernetes' to run replicas.",
            {"target": self.name},
        )
