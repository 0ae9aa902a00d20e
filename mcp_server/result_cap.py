"""The last-resort cap on a tool result (issue 35): every result is meant to be bounded
by design (lists page, the doctor groups, describe summarises), but an agent holds about
40 KB, so whatever still comes out larger is cut here, never sent whole.

The cut keeps the result valid: structuredContent stays an object with its key field
(the outputSchema's one typed field), the largest list or dict loses its last entries and
the largest string its beginning (a log's end is where a failure is), until it fits.
What was cut is said in `truncated` (each cut: where, how much kept of how much) beside
the call that fetches the rest: the same tool from a cursor, with a smaller page, or a
log's tail. The text summary keeps its head and its end, the middle marked."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mcp_types import CallToolResult, TextContent

from skills.shared.paging import after_name
from skills.shared.tooling import ToolSpec

MAX_RESULT_BYTES = 40_000
# Of the cap, what the text summary may keep (its head and its end) when cut.
TEXT_HEAD_CHARS = 2_000
TEXT_END_CHARS = 6_000
# Room left for the `truncated` note itself and JSON's framing.
NOTE_RESERVE = 1_500
CUT_KEY = "truncated"

Nester = Callable[[dict[str, Any]], dict[str, Any]]


def result_bytes(result: CallToolResult) -> int:
    """The result's size as sent (JSON)."""
    return len(result.model_dump_json(by_alias=True, exclude_none=True).encode())


def _size(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), default=str).encode())


def cap_result(
    result: CallToolResult,
    spec: ToolSpec,
    arguments: dict[str, Any],
    lookup: Callable[[str], ToolSpec | None],
    nester: Nester,
    max_bytes: int = MAX_RESULT_BYTES,
) -> CallToolResult:
    """The result as is when it fits in `max_bytes`; else cut to fit, marked, with the
    call for the rest."""
    if result_bytes(result) <= max_bytes:
        return result
    text = _cut_text("".join(c.text for c in result.content if isinstance(c, TextContent)))
    budget = max_bytes - len(text.encode()) - NOTE_RESERVE
    capped = _capped(result, text, budget, spec, arguments, lookup, nester, max_bytes)
    for _ in range(3):  # the JSON as sent differs a little from the estimate: cut again
        over = result_bytes(capped) - max_bytes
        if over <= 0 or not isinstance(result.structured_content, dict):
            break
        budget -= over + NOTE_RESERVE
        capped = _capped(result, text, budget, spec, arguments, lookup, nester, max_bytes)
    return capped


def _capped(
    result: CallToolResult,
    text: str,
    budget: int,
    spec: ToolSpec,
    arguments: dict[str, Any],
    lookup: Callable[[str], ToolSpec | None],
    nester: Nester,
    max_bytes: int,
) -> CallToolResult:
    data = result.structured_content
    cuts: list[dict[str, Any]] = []
    if isinstance(data, dict):
        data, cuts = cut_to_fit(data, budget)
    rest = nester(rest_call(spec, arguments, cuts, lookup, data))
    if isinstance(data, dict):
        data = {**data, CUT_KEY: {"max_bytes": max_bytes, "cut": cuts, "rest": rest}}
    shown = ", ".join(_cut_words(c) for c in cuts) or "the summary's middle"
    text += (
        f"\n(cut at {max_bytes // 1000} KB: {shown}; the rest: {rest['tool']} "
        f"{json.dumps(rest['arguments'], separators=(',', ':'))})"
    )
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=data,
        is_error=result.is_error,
    )


def _cut_text(text: str) -> str:
    if len(text) <= TEXT_HEAD_CHARS + TEXT_END_CHARS:
        return text
    left = len(text) - TEXT_HEAD_CHARS - TEXT_END_CHARS
    return f"{text[:TEXT_HEAD_CHARS]}\n[... {left} characters cut ...]\n{text[-TEXT_END_CHARS:]}"


def _cut_words(cut: dict[str, Any]) -> str:
    unit = "characters (the end kept)" if cut["kind"] == "text" else "entries"
    return f"{cut['path']} {cut['kept']} of {cut['of']} {unit}"


# --- cutting the data --------------------------------------------------------------------


def cut_to_fit(data: dict[str, Any], budget: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """`data` cut until its JSON is at most `budget` bytes: each round cuts the largest
    list, dict or string (not the top object itself) by what is over. The cuts made, in
    order: {"path", "kind": list|dict|text, "kept", "of"}."""
    data = json.loads(json.dumps(data, default=str))  # a copy the cuts may change
    cuts: list[dict[str, Any]] = []
    for _ in range(32):  # each round removes at least the largest node's excess
        over = _size(data) - budget
        if over <= 0:
            break
        found = _largest(data, ())
        if found is None:
            break
        path, node, size = found
        kept, kind, of = _shrunk(node, max(0, size - over))
        _put(data, path, kept)
        label = ".".join(str(p) for p in path)
        # A second cut of the same place: one entry, counted against the original.
        of = next((c["of"] for c in cuts if c["path"] == label), of)
        cuts = [c for c in cuts if c["path"] != label]
        cuts.append({"path": label, "kind": kind, "kept": len(kept), "of": of})
    return data, cuts


Found = tuple[tuple[Any, ...], Any, int]  # (path, node, size)


def _largest(node: dict[Any, Any] | list[Any], path: tuple[Any, ...]) -> Found | None:
    """The largest cuttable node under `node` (a list or dict with entries, or a string
    longer than a line), as (path, node, size)."""
    best: Found | None = None
    children = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for key, child in children:
        if key == CUT_KEY:
            continue
        here = path + (key,)
        if isinstance(child, (dict, list)) and child:
            size = _size(child)
            inner = _largest(child, here)
            # Cut inside when one entry holds most of it (a log in a job), else here.
            candidate = inner if inner and inner[2] * 2 > size else (here, child, size)
        elif isinstance(child, str) and len(child) > 200:
            candidate = (here, child, _size(child))
        else:
            continue
        if best is None or candidate[2] > best[2]:
            best = candidate
    return best


def _shrunk(node: Any, target: int) -> tuple[Any, str, int]:
    """`node` cut to at most `target` bytes: a list or dict keeps its first entries, a
    string its end. (what is kept, its kind, its length before)."""
    if isinstance(node, str):
        keep = max(0, target - 2) // 4 if not node.isascii() else max(0, target - 2)
        return (node[-keep:] if keep else ""), "text", len(node)
    entries = list(node.items()) if isinstance(node, dict) else list(node)
    kept: list[Any] = []
    used = 2
    for entry in entries:
        used += _size(entry if isinstance(node, list) else {entry[0]: entry[1]}) + 1
        if used > target:
            break
        kept.append(entry)
    if isinstance(node, dict):
        return dict(kept), "dict", len(entries)
    return kept, "list", len(entries)


def _put(data: dict[str, Any], path: tuple[Any, ...], value: Any) -> None:
    node: Any = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value


# --- the call for the rest ---------------------------------------------------------------


def rest_call(
    spec: ToolSpec,
    arguments: dict[str, Any],
    cuts: list[dict[str, Any]],
    lookup: Callable[[str], ToolSpec | None],
    shown: Any = None,
) -> dict[str, Any]:
    """The call that fetches what was cut, as a next step ({"tool", "arguments", "why"}):
    a list continues from a cursor after the last entry `shown` (or a smaller page), a
    per-pod diagnosis comes grouped, a log's earlier lines come as a shorter tail; else
    the same call (nothing narrower)."""
    fields = spec.params.model_fields
    top = cuts[0] if cuts else {"path": "", "kind": "none", "kept": 0, "of": 0}
    page = top["kind"] == "list" and "." not in top["path"]
    last = _last_entry_name(spec, shown, top) if page else None
    if page and "cursor" in fields and last is not None:
        kept = max(1, top["kept"])
        args = {**arguments, "cursor": after_name(last), "limit": kept}
        return _step(spec.name, args, f"the rest after {last}, {kept} a page")
    if page and "limit" in fields:
        kept = max(1, top["kept"])
        return _step(spec.name, {**arguments, "limit": kept}, f"pages of {kept} fit")
    if arguments.get("per_pod") and "per_pod" in fields:
        return _step(spec.name, {**arguments, "per_pod": False}, "findings grouped by symptom")
    if top["kind"] == "text" and "tail_lines" in fields:
        default = fields["tail_lines"].default
        given = int(arguments.get("tail_lines") or (default if isinstance(default, int) else 100))
        lines = max(1, given * top["kept"] // max(1, top["of"]))  # the share that fit
        return _step(spec.name, {**arguments, "tail_lines": lines}, f"the last {lines} lines fit")
    logs = lookup(LOGS_TOOL) if top["kind"] == "text" else None
    if logs is not None and "job_name" in arguments:
        shared = logs.params.model_fields.keys() - {"tail_lines", "progress"}
        args = {k: v for k, v in arguments.items() if k in shared}
        return _step(LOGS_TOOL, {**args, "tail_lines": 100}, "the log's end")
    return _step(spec.name, arguments, "no narrower call: the summary says what was cut")


LOGS_TOOL = "get_training_job_logs"


def _last_entry_name(spec: ToolSpec, shown: Any, top: dict[str, Any]) -> str | None:
    """The name of the last entry a cut list kept (its Paged result names the field)."""
    field = getattr(spec.result, "entry_name", None)
    entries = shown.get(top["path"]) if isinstance(shown, dict) else None
    if not field or not isinstance(entries, list) or not 0 < top["kept"] <= len(entries):
        return None
    entry = entries[top["kept"] - 1]
    name = entry.get(field) if isinstance(entry, dict) else None
    return name if isinstance(name, str) else None


def _step(tool: str, arguments: dict[str, Any], why: str) -> dict[str, Any]:
    return {"tool": tool, "arguments": arguments, "why": why}
