"""What an MCP result's structuredContent carries: the result's data (less the fields
the result says a caller already has: ToolResult.left_out_over_mcp), lean. Log tails
are bounded and a line repeated back to back is kept once with its count: a build that
printed the same 240-character RUN line six times costs the agent one line."""

from __future__ import annotations

from typing import Any

TAIL_LINES = 60
TAIL_CHARS = 6_000


def dedupe_lines(lines: list[str]) -> list[str]:
    """Runs of one line kept once, with '(xN)' when it came N > 1 times in a row."""
    out: list[str] = []
    count = 0
    for i, line in enumerate(lines):
        count += 1
        if i + 1 < len(lines) and lines[i + 1] == line:
            continue
        out.append(line if count == 1 else f"{line} (x{count})")
        count = 0
    return out


def bounded_tail(tail: str | list[str]) -> str | list[str]:
    """The tail's last lines (at most TAIL_LINES, TAIL_CHARS), repeats collapsed."""
    lines = tail.splitlines() if isinstance(tail, str) else [str(x) for x in tail]
    kept = dedupe_lines(lines)[-TAIL_LINES:]
    while len(kept) > 1 and sum(len(x) + 1 for x in kept) > TAIL_CHARS:
        kept.pop(0)
    if kept and len(kept[0]) > TAIL_CHARS:
        kept[0] = kept[0][-TAIL_CHARS:]
    return "\n".join(kept) if isinstance(tail, str) else kept


def lean_data(data: Any) -> Any:
    """The data with every *tail field bounded, at any depth."""
    if isinstance(data, list):
        return [lean_data(item) for item in data]
    if not isinstance(data, dict):
        return data
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key.endswith("tail") and isinstance(value, (str, list)) and value:
            out[key] = bounded_tail(value)
        else:
            out[key] = lean_data(value)
    return out
