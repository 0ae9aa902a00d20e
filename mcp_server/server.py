"""Builds the MCP server from the tool registry, so MCP and CLI share one function
per tool. Tool errors reach the client as isError results carrying code, message
and hint; progress reaches it as notifications/progress; blocking work runs on a
worker thread, off the event loop. Every tool declared long gets a bounded default
wait; an operation tool runs detached and returns its operation's state; a client's
cancel reaches the work through the progress reporter."""

from __future__ import annotations

import contextvars
import inspect
import json
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations

from mcp_server.workspace import Workspace
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.paths import path_fields
from skills.shared.progress import CancellableProgress
from skills.shared.tooling import WAIT_PARAM, ToolSpec

# Agents' tool calls time out (opencode after about 60 s): an MCP call that would
# follow a job to its end follows it this long, then returns its state.
MCP_DEFAULT_WAIT_S = 40.0

# The arguments exactly as the client sent them. The SDK hands the function every field,
# defaults included; the tool's own model must see which ones were given (a setting of
# another target given on purpose is an error, a default is not).
_CLIENT_ARGUMENTS: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("arguments")

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


class _ThreadProgress(CancellableProgress):
    """Forwards reports from the tool's worker thread to the client as progress
    notifications (a no-op when the client sent no progress token). Cancelled when
    the client cancels the call: the tool's next report raises Cancelled."""

    def __init__(self, ctx: Context) -> None:
        super().__init__()
        self._ctx = ctx

    def emit(self, completed: float, total: float | None, message: str) -> None:
        anyio.from_thread.run(self._ctx.report_progress, completed, total, message or None)


def _run(spec: ToolSpec, arguments: dict[str, Any], progress: _ThreadProgress) -> Any:
    if spec.operation:
        from skills.operations import operations

        return operations.call(spec, arguments, progress)
    return spec.invoke(arguments, progress)


def _mcp_function(spec: ToolSpec) -> Any:
    """An async function whose signature is the tool's input model (flattened fields
    included), for the SDK to publish as the tool's input and output schema."""

    async def call(ctx: Context, **arguments: Any) -> Any:
        arguments = _CLIENT_ARGUMENTS.get(arguments)
        progress = _ThreadProgress(ctx)
        try:
            return await anyio.to_thread.run_sync(
                _run, spec, arguments, progress, abandon_on_cancel=True
            )
        except ToolFailure as failure:
            return error_result(failure)
        except anyio.get_cancelled_exc_class():
            progress.cancel()  # the thread stops at its next report
            raise

    params = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=inspect.Parameter.empty if info.is_required() else info.default,
            annotation=Annotated[info.annotation, info],
        )
        for name, info in spec.params.model_fields.items()
    ]
    ctx_param = inspect.Parameter(
        "ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Context
    )
    result = spec.result
    if spec.operation:
        from skills.operations.operation_state import state_model

        result = state_model(spec.result)
    call.__signature__ = inspect.Signature(
        [ctx_param, *params], return_annotation=result
    )
    call.__annotations__ = {
        "ctx": Context,
        **{p.name: p.annotation for p in params},
        "return": result,
    }
    call.__name__ = spec.name
    return call


_SUBSCHEMAS = ("items", "additionalProperties", "not")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_MAPS = ("properties", "$defs", "patternProperties")


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """{"anyOf": [{"type": T, ...}, {"type": "null"}]} as {"type": [T, "null"], ...}: the
    same rule (keywords like minimum or pattern apply only to their own type), shorter."""
    branches = schema.get("anyOf")
    if not (isinstance(branches, list) and len(branches) == 2 and {"type": "null"} in branches):
        return schema
    (other,) = [b for b in branches if b != {"type": "null"}]
    if not isinstance(other.get("type"), str) or "const" in other:
        return schema
    merged = {**{k: v for k, v in schema.items() if k != "anyOf"}, **other}
    merged["type"] = [other["type"], "null"]
    if "enum" in other:
        merged["enum"] = [*other["enum"], None]
    return merged


def compact_schema(schema: Any, drop: tuple[str, ...]) -> Any:
    """The schema without the annotation keywords in `drop` at any depth (property
    names are left alone), nullable types written short. An agent pays for every byte
    of tools/list in every session: pydantic's generated titles repeat the names, and
    an output schema's descriptions and defaults repeat the tool's own."""
    if not isinstance(schema, dict):
        return schema
    schema = _nullable(schema)
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in drop and not isinstance(value, (dict, list)):
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            value = {name: compact_schema(sub, drop) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            value = [compact_schema(sub, drop) for sub in value]
        elif key in _SUBSCHEMAS:
            value = compact_schema(value, drop)
        out[key] = value
    return out


def _without_null_defaults(schema: dict[str, Any]) -> dict[str, Any]:
    """`"default": null` on an input says nothing a property's absence from `required`
    does not: leaving it out means None. Other defaults stay."""
    properties = {
        name: {k: v for k, v in sub.items() if not (k == "default" and v is None)}
        for name, sub in schema.get("properties", {}).items()
    }
    return {**schema, "properties": properties} if properties else schema


def outline_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """An output schema cut to its top-level fields and their JSON types: what a result
    holds, without the nested models (which the tool's description and each field's
    name already tell). A full JobState or operation schema costs every agent 1-2 KB of
    tools/list per tool; a client still validates structured content against this."""
    defs = schema.get("$defs", {})
    outline: dict[str, Any] = {"type": "object"}
    properties = {name: {"type": _json_types(sub, defs)} for name, sub in
                  schema.get("properties", {}).items()}  # fmt: skip
    outline["properties"] = {
        name: ({} if not types else {"type": types[0] if len(types) == 1 else types})
        for name, sub in properties.items()
        for types in [sub["type"]]
    }
    if schema.get("required"):
        outline["required"] = schema["required"]
    return outline


def _json_types(schema: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    """The JSON types a value of `schema` may have; [] when any type may come."""
    if "$ref" in schema:
        target = defs.get(schema["$ref"].rsplit("/", 1)[-1], {})
        return _json_types(target, defs) if target else ["object"]
    if "enum" in schema or "const" in schema:
        values = schema.get("enum", [schema.get("const")])
        names = {bool: "boolean", int: "integer", float: "number", str: "string"}
        return sorted({names.get(type(v), "null") for v in values})
    branches = schema.get("anyOf") or schema.get("oneOf")
    if branches:
        found = [_json_types(b, defs) for b in branches]
        if any(not f for f in found):
            return []
        return sorted({t for f in found for t in f})
    declared = schema.get("type")
    if declared is None:
        return []
    return [declared] if isinstance(declared, str) else sorted(declared)


class ToolServer(MCPServer):
    """MCPServer whose tool calls validate through the tool's own input model first,
    so bad input comes back with the project's error code and hint. With a workspace,
    every local path in a call must lie where the workspace allows (checked here, not
    in the tools: the CLI's caller owns the machine, an MCP caller does not)."""

    def __init__(
        self,
        specs: Iterable[ToolSpec],
        workspace: Workspace | None = None,
        read_only: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.workspace = workspace
        # A read-only server serves only read-only tools, and of those no parameter that
        # writes a file (diagnose_training_job's save_snapshot): hidden and refused.
        self.read_only = read_only
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

    async def list_tools(self) -> list[Any]:
        tools = await super().list_tools()
        for listed in tools:
            # String grammar (pattern, lengths) stays out: the tool's own model still checks
            # it and a refusal says the rule; listing it cost every session ~4.5 KB for 16
            # tools. Numeric bounds and enums stay: they tell an agent what to choose.
            listed.input_schema = _without_null_defaults(
                compact_schema(listed.input_schema, ("title", "pattern", "minLength", "maxLength"))
            )
            if self.read_only:
                _hide(listed.input_schema, writing_parameters(self.specs[listed.name]))
            if listed.output_schema is not None:
                listed.output_schema = outline_schema(listed.output_schema)
        return tools

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> Any:
        spec = self.specs.get(name)
        if spec is not None:
            field = spec.params.model_fields.get(WAIT_PARAM)
            waits_until_done = field is not None and field.default is None
            if spec.long and waits_until_done and WAIT_PARAM not in arguments:
                arguments = {**arguments, WAIT_PARAM: MCP_DEFAULT_WAIT_S}
            try:
                if self.read_only:
                    refuse_writes(spec, arguments)
                args = spec.parse(arguments)
                if self.workspace is not None:
                    arguments = self.workspace.confine(spec, args, arguments)
            except ToolFailure as failure:
                return error_result(failure)
            _CLIENT_ARGUMENTS.set(arguments)
        return await super().call_tool(name, arguments, context)


def writing_parameters(spec: ToolSpec) -> list[str]:
    """The tool's parameters that name a file it writes (LocalPath(writable=True))."""
    return [name for name, marker in path_fields(spec.params).items() if marker.writable]


def refuse_writes(spec: ToolSpec, arguments: Mapping[str, Any]) -> None:
    """ToolFailure(PERMISSION_DENIED) when a read-only server's call sets a parameter
    that writes: read-only means no writes, not only no write tools."""
    given = [name for name in writing_parameters(spec) if arguments.get(name) is not None]
    if given:
        raise ToolFailure(
            ErrorCode.PERMISSION_DENIED,
            f"This server is read-only: {spec.name} may not write ({', '.join(given)}).",
            f"Call {spec.name} without {', '.join(given)}, or use a server started "
            "without --read-only.",
            {"fields": given},
        )


def _hide(schema: dict[str, Any], names: list[str]) -> None:
    for name in names:
        schema.get("properties", {}).pop(name, None)
        if name in schema.get("required", []):
            schema["required"].remove(name)


def build_server(
    read_only: bool = False,
    specs: Iterable[ToolSpec] | None = None,
    workspace: Workspace | None = None,
) -> ToolServer:
    """The server with every registered tool; read_only=True hides tools that write.
    `workspace` confines the paths of every call (`python -m mcp_server` always gives
    one); without it, paths are unconfined, as for an in-process caller."""
    if specs is None:
        from commands import all_tools

        specs = all_tools()
    chosen = [spec for spec in specs if spec.read_only or not read_only]
    instructions = INSTRUCTIONS + (f" {workspace.describe()}" if workspace else "")
    return ToolServer(
        chosen,
        workspace,
        read_only,
        name="fsdp-eks",
        instructions=instructions,
        log_level="WARNING",
    )
