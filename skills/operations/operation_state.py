"""What an operation is, as data: the stored record and the state tools return. Kept
apart from operations.py (the store and the worker) so that serving the tools loads
neither the lock nor the process library until an operation is touched."""

from __future__ import annotations

import time
from contextvars import ContextVar
from datetime import datetime, timezone
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, create_model

from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.next_step import POLL_WAIT_S, NextStep
from skills.shared.results import ToolResult

OPERATION_ID = r"^[a-z0-9_]+-\d{8}-\d{6}-[0-9a-f]{6}$"
# The statuses an operation does not leave (the one definition; jobs have their own in
# training_job_deployer.models, with "preempted").
TERMINAL = ("succeeded", "failed", "cancelled")
OperationStatus = Literal["running", "succeeded", "failed", "cancelled"]
OperationId = Annotated[
    str,
    Field(
        pattern=OPERATION_ID,
        max_length=120,
        description="The id a tool returned (list_operations shows them).",
    ),
]

# Operations are scoped to the workspace that started them: an MCP server sets its
# workspace root here for each call, an operation records it, and a caller sees (gets,
# lists, cancels) only the operations of its own scope. The CLI and in-process callers
# have no workspace (None): they see the unscoped operations, those started the same way.
OPERATION_SCOPE: ContextVar[str | None] = ContextVar("operation_scope", default=None)


class OperationProgress(BaseModel):
    completed: float = 0
    total: float | None = None
    message: str = ""


class OperationRecord(BaseModel):
    """What is stored: everything a later call needs to report on or stop the work."""

    operation_id: str
    tool: str
    entry: str = Field(description="module:function the worker runs.")
    arguments: dict[str, Any]
    cwd: str
    workspace: str | None = Field(
        default=None, description="The MCP server's workspace that started it; None: the CLI."
    )
    status: OperationStatus = "running"
    progress: OperationProgress = Field(default_factory=OperationProgress)
    log_tail: list[str] = Field(default_factory=list)
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    created_at: float
    updated_at: float
    ended_at: float | None = None
    pid: int | None = None
    pid_started: float | None = None
    cancel_requested: bool = False


class OperationState(ToolResult):
    """An operation as a tool returns it; `result` is the tool's result once it succeeded."""

    operation_id: str
    tool: str
    status: OperationStatus
    completed: float = 0
    total: float | None = None
    message: str = Field(default="", description="The latest progress message.")
    log_tail: list[str] = Field(default_factory=list, description="Recent progress messages.")
    result: dict[str, Any] | None = Field(default=None, description="The tool's result, when done.")
    error: dict[str, Any] | None = Field(default=None, description="code, message, hint, details.")
    created_at: str
    elapsed_s: float
    next_step: NextStep | None = None

    @classmethod
    def of(cls, record: OperationRecord) -> OperationState:
        end = record.ended_at or time.time()
        state = cls(
            operation_id=record.operation_id,
            tool=record.tool,
            status=record.status,
            completed=record.progress.completed,
            total=record.progress.total,
            message=record.progress.message,
            log_tail=record.log_tail,
            result=record.result,
            error=record.error,
            created_at=datetime.fromtimestamp(record.created_at, timezone.utc).isoformat(),
            elapsed_s=round(end - record.created_at, 3),
        )
        if record.status == "running":
            # With a wait, as every other "follow it" step: the call returns when the
            # operation ends (or after POLL_WAIT_S), where a bare get_operation answered
            # at once and an agent following the steps polled at its own pace.
            state.next_step = NextStep(
                tool="get_operation",
                arguments={"operation_id": record.operation_id, "wait_seconds": POLL_WAIT_S},
                why="follow it (cancel_operation with confirm=true stops it)",
            )
        elif record.error and record.error.get("next_step"):
            state.next_step = NextStep.model_validate(record.error["next_step"])
        elif record.result and record.result.get("next_step"):
            state.next_step = NextStep.model_validate(record.result["next_step"])
        return state

    def summary_rows(self) -> list[tuple[str, Any]]:
        of_total = f"/{self.total:g}" if self.total is not None else ""
        rows: list[tuple[str, Any]] = [
            ("operation", self.operation_id),
            ("tool", self.tool),
            ("status", self.status),
            ("progress", f"{self.completed:g}{of_total} {self.message}".rstrip()),
            ("elapsed", f"{self.elapsed_s:.1f} s"),
        ]
        if self.error:
            rows.append(("error", f"[{self.error.get('code')}] {self.error.get('message')}"))
            if self.error.get("hint"):
                rows.append(("hint", self.error["hint"]))
        if self.result:
            # state_model types `result` as the tool's own model; the record holds a dict.
            result = self.result
            result = result.model_dump(mode="json") if isinstance(result, BaseModel) else result
            rows += [
                (f"result.{k}", v)
                for k, v in result.items()
                if v is not None and not isinstance(v, (dict, list))
            ]
        return rows

    def left_out_over_mcp(self) -> set[str] | dict[str, Any]:
        """The result's own (a started job's plan, ...); once it ended with a result, the
        progress messages too (the result is the account)."""
        left: dict[str, Any] = {}
        if isinstance(self.result, ToolResult):
            inner = self.result.left_out_over_mcp()
            left["result"] = dict.fromkeys(inner, True) if isinstance(inner, set) else inner
        if self.status in TERMINAL and self.result is not None:
            left["log_tail"] = True
        return {k: v for k, v in left.items() if v}

    def compact(self, data: dict[str, Any]) -> dict[str, Any]:
        if isinstance(self.result, ToolResult) and isinstance(data.get("result"), dict):
            return {**data, "result": self.result.compact(data["result"])}
        return data

    def failure(self) -> ToolFailure | None:
        """A failed operation's error (its code, hint and next step)."""
        if self.status != "failed":
            return None
        return self.as_failure(f"{self.tool} failed.")

    def as_failure(self, message: str) -> ToolFailure:
        """This ended operation's error as a failure: its code, message, hint and next
        step, the operation's id in details (`message` and operation_failed when it
        recorded none)."""
        error = {"code": ErrorCode.OPERATION_FAILED, "message": message}
        error.update(self.error or {})
        error["details"] = {"operation_id": self.operation_id, **(error.get("details") or {})}
        failure = ToolFailure.from_dict(error)
        failure.next_step = failure.next_step or self.next_step
        return failure

    def cli_exit_status(self) -> int:
        return 1 if self.status in ("failed", "cancelled") else 0


def outcome(result: ToolResult) -> dict[str, Any]:
    """How an operation whose tool returned `result` ended: its status is the result's
    (a build that failed is a failed operation), with the result and, when it failed,
    the result's failure as the error."""
    data: dict[str, Any] = {"result": result.model_dump(mode="json")}
    failure = result.failure()
    if failure is None:
        return {"status": "succeeded", **data}
    return {"status": "failed", **data, "error": failure.to_dict()["error"]}


@cache
def state_model(result: type[ToolResult]) -> type[OperationState]:
    """OperationState whose `result` is typed as the tool's own result (its MCP schema)."""
    optional_result: Any = result | None  # a type built at run time (no static form)
    return create_model(
        f"{result.__name__}Operation",
        __base__=OperationState,
        result=(optional_result, Field(default=None, description="The tool's result, when done.")),
    )
