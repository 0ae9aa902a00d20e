"""Builds the MCP server from the tool registry, so MCP and CLI share one function
per tool. Tool errors reach the client as isError results carrying code, message
and hint; progress reaches it as notifications/progress; blocking work runs on a
worker thread, off the event loop."""

from __future__ import annotations

import inspect
import json
from collections.abc import Iterable
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations

from skills.shared.errors import ToolFailure
from skills.shared.tooling import PROGRESS_PARAM, ToolSpec

# Agents' tool calls time out (opencode after about 60 s): an MCP call that would
# follow a job to its end follows it this long, then returns its state.
MCP_DEFAULT_WAIT_S = 40.0
WAIT_PARAM = "wait_seconds"

INSTRUCTIONS = (
    "fsdp-eks takes a PyTorch FSDP training job from source to a running, monitored job. "
    "deploy_training_job starts a job (dry_run=true shows the exact plan first) and returns "
    "within wait_seconds; follow a running job with get_training_job. Errors carry a code, "
    "a message and a hint saying what to do next."
)


def error_result(failure: ToolFailure) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(failure.to_dict()))], is_error=True
    )


class _ThreadProgress:
    """Forwards reports from the tool's worker thread to the client as progress
    notifications (a no-op when the client sent no progress token)."""

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def report(self, completed: float, total: float | None = None, message: str = "") -> None:
        anyio.from_thread.run(self._ctx.report_progress, completed, total, message or None)


def _mcp_function(spec: ToolSpec) -> Any:
    """An async function with the tool's own signature (plus ctx), for the SDK to
    publish as the tool's input and output schema."""

    async def call(ctx: Context, **arguments: Any) -> Any:
        try:
            return await anyio.to_thread.run_sync(spec.invoke, arguments, _ThreadProgress(ctx))
        except ToolFailure as failure:
            return error_result(failure)

    signature = inspect.signature(spec.fn, eval_str=True)
    params = [p for p in signature.parameters.values() if p.name != PROGRESS_PARAM]
    ctx_param = inspect.Parameter(
        "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context
    )
    call.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[ctx_param, *params], return_annotation=spec.result
    )
    call.__annotations__ = {
        "ctx": Context,
        **{p.name: p.annotation for p in params},
        "return": spec.result,
    }
    call.__name__ = spec.name
    return call


class ToolServer(MCPServer):
    """MCPServer whose tool calls validate through the tool's own input model first,
    so bad input comes back with the project's error code and hint."""

    def __init__(self, specs: Iterable[ToolSpec], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.specs: dict[str, ToolSpec] = {}
        for spec in specs:
            self.specs[spec.name] = spec
            self.add_tool(
                _mcp_function(spec),
                name=spec.name,
                description=spec.description,
                annotations=ToolAnnotations(
                    read_only_hint=spec.read_only,
                    destructive_hint=spec.destructive,
                    idempotent_hint=spec.idempotent,
                ),
            )

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> Any:
        spec = self.specs.get(name)
        if spec is not None:
            field = spec.params.model_fields.get(WAIT_PARAM)
            if field is not None and field.default is None and WAIT_PARAM not in arguments:
                arguments = {**arguments, WAIT_PARAM: MCP_DEFAULT_WAIT_S}
            try:
                spec.parse(arguments)
            except ToolFailure as failure:
                return error_result(failure)
        return await super().call_tool(name, arguments, context)


def build_server(read_only: bool = False, specs: Iterable[ToolSpec] | None = None) -> ToolServer:
    """The server with every registered tool; read_only=True hides tools that write."""
    if specs is None:
        from commands import all_tools

        specs = all_tools()
    chosen = [spec for spec in specs if spec.read_only or not read_only]
    return ToolServer(chosen, name="fsdp-eks", instructions=INSTRUCTIONS, log_level="WARNING")
