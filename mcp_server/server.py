"""Builds the MCP server from the tool registry, so MCP and CLI share one function
per tool. tools/list comes from precomputed, cached entries (listing.py) and a tool's
module is imported on its first call. A call is validated once, by the tool's own
model; its work runs on a worker thread, off the event loop. A result's text is a
short summary and its structuredContent the data (lean.py), the whole at most 40 KB
(result_cap.py: cut, marked, with the call for the rest); tool errors reach the
client as isError results carrying code, message and hint; progress reaches it as
notifications/progress. Every tool declared long gets a bounded default wait; an
operation tool runs detached and returns its operation's state; a client's cancel
reaches the work through the progress reporter."""

from __future__ import annotations

import base64
import copy
import json
import logging
import warnings
from collections.abc import Callable, Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, ImageContent, TextContent, Tool

from commands import tool_spec
from commands._old_names import redirect
from mcp_server.frames import CheckedFrames
from mcp_server.lean import bounded_tail, lean_data
from mcp_server.listing import (
    WRITES_KEY,
    cached_entries,
    entries_of,
    nest,
    unnest,
    writing_parameters,
)
from mcp_server.result_cap import cap_result
from mcp_server.shared_reads import SharedReads, key_of
from mcp_server.spellings import translate
from mcp_server.workspace import Workspace
from skills.operations.operation_state import OPERATION_SCOPE, OperationState
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.paths import WORKING_DIR
from skills.shared.progress import CancellableProgress, Cancelled
from skills.shared.tooling import WAIT_PARAM, ToolSpec
from skills.shared.write_gate import closed_to_writes

logger = logging.getLogger(__name__)

# Agents' tool calls time out (opencode after about 60 s, the TypeScript SDK's default
# request timeout is 60 s): an MCP call that would follow a job to its end follows it
# this long, then returns its state; a caller's longer wait is cut to MCP_MAX_WAIT_S
# (a long wait is a series of polls, each streaming progress).
MCP_DEFAULT_WAIT_S = 40.0
MCP_MAX_WAIT_S = 45.0
# How long the server waits for a client's answer to roots/list.
ROOTS_TIMEOUT_S = 5.0
# Request handlers the SDK registers that this server has nothing behind: not advertised.
_UNSERVED = (
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/read",
    "resources/templates/list",
)

# A result's text content is a summary, at most this long.
MAX_TEXT_CHARS = 8_000
# A log or a dry run's script is the text itself: this much of its end (results < 40 KB).
MAX_PLAIN_CHARS = 32_000

INSTRUCTIONS = (
    "fsdp-eks takes a PyTorch FSDP training job from source to a running, monitored job. "
    "deploy_training_job starts a job (dry_run=true shows the exact plan first) and returns "
    "within wait_seconds; follow a running job with get_training_job. Errors carry a code, "
    "a message and a hint saying what to do next. A target's settings object (local, "
    "kubernetes, slurm) takes only the keys its schema lists."
)


# Nests a next step's flat arguments the way its tool's input schema does.
Nester = Callable[[dict[str, Any]], dict[str, Any]]


def _flat(step: dict[str, Any]) -> dict[str, Any]:
    return step


def error_result(
    failure: ToolFailure, nester: Nester = _flat, data: dict[str, Any] | None = None
) -> CallToolResult:
    """isError=true: the text is the failure (code, message, hint, details and the next
    step as its tool takes it); a failed result's data rides along as structuredContent."""
    error = failure.to_dict()
    if "next_step" in error["error"]:
        error["error"]["next_step"] = nester(error["error"]["next_step"])
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(error))],
        structured_content=data,
        is_error=True,
    )


def with_nested_steps(data: Any, nester: Nester) -> Any:
    """The data with every next_step (at any depth: an operation's result's too) nested
    for its tool's schema."""
    if isinstance(data, list):
        return [with_nested_steps(item, nester) for item in data]
    if not isinstance(data, dict):
        return data
    out = {key: with_nested_steps(value, nester) for key, value in data.items()}
    step = out.get("next_step")
    if isinstance(step, dict) and isinstance(step.get("arguments"), dict) and "tool" in step:
        out["next_step"] = nester(step)
    return out


class _ThreadProgress(CancellableProgress):
    """Forwards reports from the tool's worker thread to the client as progress
    notifications (a no-op when the client sent no progress token). Cancelled when
    the client cancels the call: the tool's next report raises Cancelled."""

    def __init__(self, ctx: Context) -> None:
        super().__init__()
        self._ctx = ctx

    def emit(self, completed: float, total: float | None, message: str) -> None:
        anyio.from_thread.run(self._ctx.report_progress, completed, total, message or None)


def _run(
    spec: ToolSpec, arguments: dict[str, Any], progress: _ThreadProgress, scope: str | None
) -> Any:
    # This worker thread's own context: the calling session's workspace, for the
    # operations it may see and for the tools' project defaults (never the process's cwd).
    OPERATION_SCOPE.set(scope)
    WORKING_DIR.set(None if scope is None else Path(scope))
    if spec.operation:
        from skills.operations import operations  # sqlite3, psutil, filelock: off the start

        return operations.call(spec, arguments, progress)
    return spec.invoke(arguments, progress)


def summary_text(result: Any, nester: Nester = _flat) -> str:
    """The text content of a result: what a person reads (status, the figures, one
    `next:` line: the call to make, as its tool takes it; a log or a dry run's plan as
    it is). The data itself is structuredContent, not repeated here."""
    plain = result.plain_text() if hasattr(result, "plain_text") else None
    step = getattr(result, "next_step", None)
    next_line = f"next: {_step_text(nester(step.model_dump()))}" if step else ""
    if plain:
        return (_plain_excerpt(plain) + f"\n{next_line}").rstrip()
    rows = result.summary_rows() if hasattr(result, "summary_rows") else []
    lines = [
        f"{name}: {_row_text(name, value)}"
        for name, value in rows
        if value not in _EMPTY and name != "next"  # the next step: one line, below
    ]
    text = "\n".join(lines)[:MAX_TEXT_CHARS] or "done"
    if next_line:
        text += f"\n{next_line}"
    return text + ("\n(the data: structuredContent)" if lines else "")


def _step_text(step: dict[str, Any]) -> str:
    why = f"  ({step['why']})" if step.get("why") else ""
    return f"{step['tool']} {json.dumps(step['arguments'], separators=(',', ':'))}{why}"


_EMPTY = (None, "", [], {})
# A multi-line value in the summary (a manifest, a script, a log tail) is shown whole up
# to this many characters; a longer one as its last lines, marked, with where the whole is.
SUMMARY_WHOLE_CHARS = 6_000
SUMMARY_TAIL_LINES = 40


def _row_text(name: str, value: Any) -> str:
    text = str(value)
    if "\n" not in text:
        return text
    lines = text.splitlines()
    if len(text) <= SUMMARY_WHOLE_CHARS:
        return "\n" + text
    tail = bounded_tail(lines)[-SUMMARY_TAIL_LINES:]
    return (
        f"\n(an excerpt: the last {len(tail)} of {len(lines)} lines; the whole is "
        f"structuredContent.{name})\n" + "\n".join(tail)
    )


def _plain_excerpt(plain: str) -> str:
    """A log or a plan as the text itself: whole, or its last whole lines with a marker
    that says how much was left out (the whole is in structuredContent)."""
    if len(plain) <= MAX_PLAIN_CHARS:
        return plain
    lines = plain.splitlines()
    kept: list[str] = []
    size = 0
    for line in reversed(lines):
        size += len(line) + 1
        if size > MAX_PLAIN_CHARS and kept:
            break
        kept.append(line[-MAX_PLAIN_CHARS:])
    kept.reverse()
    return (
        f"(an excerpt: the last {len(kept)} of {len(lines)} lines; the whole is in "
        "structuredContent)\n" + "\n".join(kept)
    )


def image_content(result: Any) -> list[ImageContent]:
    """The result's picture (a job's loss curves), as MCP image content."""
    image = result.image() if hasattr(result, "image") else None
    if image is None:
        return []
    data = base64.b64encode(image[1]).decode()
    return [ImageContent(type="image", data=data, mime_type="image/png")]


def structured(result: Any) -> dict[str, Any]:
    left_out = result.left_out_over_mcp() if hasattr(result, "left_out_over_mcp") else set()
    data = result.model_dump(mode="json", exclude=left_out)
    return lean_data(result.compact(data) if hasattr(result, "compact") else data)


def own_failure(spec: ToolSpec, result: Any) -> ToolFailure | None:
    """The failure of the work this call did (a failed build or job, its failed
    operation): such a call is a failed call. A tool reporting on other work (a read-only
    tool; cancel_operation on an operation that had failed) did not fail."""
    if spec.read_only or not hasattr(result, "failure"):
        return None
    if isinstance(result, OperationState) and result.tool != spec.name:
        return None
    return result.failure()


def _run_safely(
    spec: ToolSpec,
    arguments: dict[str, Any],
    progress: _ThreadProgress,
    scope: str | None,
    read_only: bool = False,
) -> Any:
    """The tool's result, or its ToolFailure; a bug becomes internal_error (the details
    go to the server's log, never to the client). A read-only server's call runs closed
    to writes (write_gate): what its read would repair in a record is answered, not kept."""
    try:
        with closed_to_writes(read_only):
            return _run(spec, arguments, progress, scope)
    except (ToolFailure, Cancelled):
        raise
    except Exception:
        logger.exception("tool %s crashed", spec.name)
        raise ToolFailure(
            ErrorCode.INTERNAL_ERROR,
            f"{spec.name} failed unexpectedly.",
            "This is a bug in the tool; the server's log has the details. Try again or report it.",
        ) from None


class ToolServer(MCPServer):
    """MCPServer whose tools/list is served from precomputed entries (cached across
    starts: listing.py) and whose tool calls import the tool on first use, validate
    through its own input model (bad input comes back with the project's error code and
    hint) and run on a worker thread, off the event loop. With a workspace, every local
    path in a call must lie where the workspace allows (checked here, not in the tools:
    the CLI's caller owns the machine, an MCP caller does not)."""

    def __init__(
        self,
        entries: list[dict[str, Any]],
        load: Callable[[str], ToolSpec],
        workspace: Workspace | None = None,
        read_only: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        for method in _UNSERVED:  # no prompts or resources: none advertised
            self._lowlevel_server._request_handlers.pop(method, None)
        # The server's own workspace: --workspace, else where it started. A session whose
        # client names roots gets its own (session_workspace); this one never changes.
        self.workspace = workspace
        # A read-only server serves only read-only tools, and of those no parameter that
        # writes a file (diagnose_training_job's save_snapshot): hidden and refused.
        self.read_only = read_only
        listed = [_as_listed(entry, read_only) for entry in entries]
        self._entries = {entry["name"]: entry for entry in listed}
        self._load = load
        self._tools = [Tool.model_validate(entry) for entry in listed]
        self.shared_reads = SharedReads()

    def streamable_http_app(self, **kwargs: Any) -> Any:
        """The SDK's HTTP app behind frames.CheckedFrames: a POST that is not one
        JSON-RPC message gets its JSON-RPC error there, as a stdio line does."""
        return CheckedFrames(super().streamable_http_app(**kwargs))

    def spec(self, name: str) -> ToolSpec | None:
        """The tool's spec, its module imported on the first call; None if not served."""
        return self._load(name) if name in self._entries else None

    async def list_tools(self) -> list[Any]:
        return list(self._tools)

    def _tool_input_schema(self, name: str) -> dict[str, Any] | None:
        # The SDK's hook for HTTP header checks; our tools are not in its tool manager.
        entry = self._entries.get(name)
        return None if entry is None else entry["inputSchema"]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context | None = None
    ) -> Any:
        spec = self.spec(name)
        if spec is None:  # an old name of a tool (build_docker_image): the exact call
            if (renamed := redirect(name, arguments or {})) is not None:
                return error_result(renamed, self.nest_step)
            return await super().call_tool(name, arguments, context)
        if context is None:
            context = Context(mcp_server=self, subscriptions=self._subscriptions)
        try:
            workspace = await self.session_workspace(context)
        except ToolFailure as failure:
            return error_result(failure, self.nest_step)
        sent = arguments or {}
        given = sent  # the validated arguments, once validated: the cap's call names them
        progress = _ThreadProgress(context)
        # Operations are scoped to the workspace that started them (operation_state).
        scope = None if workspace is None else str(workspace.root)

        async def answer() -> CallToolResult:
            nonlocal given
            given = self._arguments(spec, sent, workspace)  # ToolFailure: shared, not kept
            result = await anyio.to_thread.run_sync(
                _run_safely,
                spec,
                given,
                progress,
                scope,
                self.read_only,
                abandon_on_cancel=True,
            )
            return self.capped(spec, given, self.respond(spec, result))

        try:
            if self._shares(spec):  # the whole answer is shared: summary and data too
                # Keyed by the call as sent: a repeat within the TTL is answered before any
                # validation (the call that computed it validated the same arguments in
                # the same workspace), which is most of a shared read's cost.
                return await self.shared_reads.get(key_of(spec.name, sent, scope), answer)
            self.shared_reads.clear()  # what this call may change, no read serves from before
            return await answer()
        except ToolFailure as failure:
            return self.capped(spec, given, error_result(failure, self.nest_step))
        except anyio.get_cancelled_exc_class():
            progress.cancel()  # the thread stops at its next report
            raise

    @staticmethod
    def _shares(spec: ToolSpec) -> bool:
        """A read whose answer callers asking the same may share (shared_reads)."""
        return (
            spec.read_only
            and spec.idempotent
            and not spec.long
            and not spec.operation
            and not writing_parameters(spec)
        )

    async def session_workspace(self, context: Context) -> Workspace | None:
        """The calling session's workspace. With --workspace, the server's. Without, the
        client's project: its first file:// root that is a directory here (asked once per
        session), else the directory the server started in. Kept with the session, never
        on the server: one client's roots are never another client's workspace."""
        if self.workspace is None or self.workspace.chosen:
            return self.workspace
        state = _session_state(context)
        if state is not None and _WORKSPACE_KEY in state:
            return state[_WORKSPACE_KEY]
        root = await client_root(context)  # ToolFailure: roots, none of them here
        settled = self.workspace if root is None else self.workspace.at(root)
        if state is not None:
            state[_WORKSPACE_KEY] = settled
        return settled

    def respond(self, spec: ToolSpec, result: Any) -> CallToolResult:
        """The tool's result as the client gets it: a summary and the data, or, when
        the work it did failed, an isError result with the failure and the data."""
        data = with_nested_steps(structured(result), self.nest_step)
        failure = own_failure(spec, result)
        if failure is not None:
            return error_result(failure, self.nest_step, data)
        try:
            text = summary_text(result, self.nest_step)
        except Exception:  # a bug in a summary must not lose the result
            logger.exception("summary of %s failed", spec.name)
            text = json.dumps(data)
        return CallToolResult(
            content=[TextContent(type="text", text=text), *image_content(result)],
            structured_content=data,
        )

    def capped(
        self, spec: ToolSpec, arguments: dict[str, Any], result: CallToolResult
    ) -> CallToolResult:
        """The result within the last-resort cap (result_cap): cut, marked, with the call
        for the rest, when a tool's own bounds were not enough."""
        return cap_result(result, spec, arguments, self.spec, self.nest_step)

    def nest_step(self, step: dict[str, Any]) -> dict[str, Any]:
        """A next step's arguments nested the way the named tool's input schema nests
        them (as the agent will send them back); a tool not served stays flat."""
        spec = self.spec(step.get("tool", ""))
        if spec is None:
            return step
        return {**step, "arguments": nest(spec, step.get("arguments") or {})}

    def _arguments(
        self, spec: ToolSpec, arguments: dict[str, Any], workspace: Workspace | None = None
    ) -> dict[str, Any]:
        """The call's flat arguments, validated and confined (to `workspace`, else the
        server's), with agents' default wait."""
        workspace = workspace or self.workspace
        arguments = unnest(spec, translate(spec.name, arguments))
        if self.read_only:
            refuse_writes(spec, arguments)
        field = spec.params.model_fields.get(WAIT_PARAM)
        waits_until_done = field is not None and field.default is None
        if spec.long and waits_until_done and WAIT_PARAM not in arguments:
            arguments = {**arguments, WAIT_PARAM: MCP_DEFAULT_WAIT_S}
        wait = arguments.get(WAIT_PARAM)
        if isinstance(wait, (int, float)) and not isinstance(wait, bool) and wait > MCP_MAX_WAIT_S:
            arguments = {**arguments, WAIT_PARAM: MCP_MAX_WAIT_S}  # then poll again
        args = spec.parse(arguments)
        if workspace is not None:
            arguments = workspace.confine(spec, args, arguments)
        return arguments


# How many of a client's missing roots an error names.
_ROOTS_SHOWN = 5
# Where a session keeps its workspace: its connection's own state (the SDK's per-client
# scratch space, which lives and dies with the session).
_WORKSPACE_KEY = "fsdp_eks.workspace"


def _session_state(context: Context) -> dict[str, Any] | None:
    """The calling session's per-connection state, or None when the call has none (an
    in-process call without a session): then nothing is kept and roots are asked again."""
    try:
        connection = getattr(context.session, "_connection", None)
    except ValueError:  # no request context: not called through a session
        return None
    state = getattr(connection, "state", None)
    return state if isinstance(state, dict) else None


async def client_root(context: Context) -> Path | None:
    """The client's first file:// root that is a directory here, or None (no roots
    capability, no answer within ROOTS_TIMEOUT_S, no local file:// root). Roots that
    name only places missing here (a client on another machine) are a ToolFailure: its
    project is not on this server, and the server's own directory is not its project."""
    named: list[str] = []
    try:
        session = context.session
        capabilities = session.client_capabilities
        if capabilities is None or capabilities.roots is None:
            return None
        with anyio.move_on_after(ROOTS_TIMEOUT_S), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # roots: deprecated in the newest protocol
            answer = await session.list_roots()
            for root in answer.roots:
                uri = urlparse(str(root.uri))
                if uri.scheme != "file" or uri.netloc not in ("", "localhost"):
                    continue
                path = Path(unquote(uri.path))
                named.append(str(path))
                if _is_directory(path):
                    return path
    except Exception:  # a client that cannot answer: the server's own directory stays
        logger.info("roots/list failed; the workspace stays the server's directory")
        return None
    if named:
        shown = named[:_ROOTS_SHOWN]  # a client may name any number
        raise ToolFailure(
            ErrorCode.NOT_FOUND,
            f"The client's roots are not directories on this server: {', '.join(shown)}.",
            "Open a project that exists on the server's machine, or start the server with "
            "--workspace DIR (or FSDP_EKS_WORKSPACE) naming the project there.",
            {"roots": shown},
        )
    return None


def _is_directory(path: Path) -> bool:
    try:
        return path.is_absolute() and path.is_dir()
    except (OSError, ValueError):  # a name too long, a NUL byte
        return False


def _as_listed(entry: dict[str, Any], read_only: bool) -> dict[str, Any]:
    """The entry as tools/list shows it: without its `writes` note, and on a read-only
    server without the parameters that write."""
    listed = {key: value for key, value in entry.items() if key != WRITES_KEY}
    if read_only and entry.get(WRITES_KEY):
        listed["inputSchema"] = copy.deepcopy(entry["inputSchema"])
        _hide(listed["inputSchema"], entry[WRITES_KEY])
    return listed


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
    one); without it, paths are unconfined, as for an in-process caller. Without
    `specs`, the listing comes from the cache and no tool module is imported yet."""
    if specs is None:
        entries, load = cached_entries(write=not read_only), tool_spec  # read-only: no writes
    else:
        given = {spec.name: spec for spec in specs}
        entries, load = entries_of(given.values()), given.__getitem__
    chosen = [e for e in entries if e["annotations"]["readOnlyHint"] or not read_only]
    instructions = INSTRUCTIONS + (f" {workspace.describe()}" if workspace else "")
    return ToolServer(
        chosen,
        load,
        workspace,
        read_only,
        name="fsdp-eks",
        version=package_version(),
        instructions=instructions,
        log_level="WARNING",
    )


def package_version() -> str:
    """The installed distribution's version (serverInfo.version)."""
    try:
        return metadata.version("fsdp-eks")
    except metadata.PackageNotFoundError:  # run from a source tree that was not installed
        return "0+unknown"
