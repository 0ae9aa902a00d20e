"""Cold start: MCP server over stdio from process start to a tools/list answer, and
`import commands` alone, each the median of 5 fresh processes. Baseline in the same
run: a bare `python -c pass`, so the ratios say what the project itself adds.
Goal: under 1.5 s to tools/list on the 2-core dev machine."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import anyio
from mcp import Client, StdioServerParameters

RUNS = 5


def _median_s(argv: list[str]) -> float:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(argv, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


async def _tools_list_once() -> float:
    start = time.perf_counter()
    params = StdioServerParameters(command=sys.executable, args=["-m", "mcp_server"])
    async with Client(params) as client:
        tools = await client.list_tools()
    elapsed = time.perf_counter() - start
    assert tools.tools, "the server listed no tools"
    return elapsed


def main() -> None:
    bare = _median_s([sys.executable, "-c", "pass"])
    commands = _median_s([sys.executable, "-c", "import commands; commands.all_tools()"])
    heavy = [
        "boto3",
        "kubernetes",
        "docker",
        "torch",
    ]
    leaked = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, commands; commands.all_tools(); import mcp_server.server;"
            f"print(','.join(m for m in {heavy!r} if m in sys.modules))",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    listing = statistics.median(anyio.run(_tools_list_once) for _ in range(RUNS))
    rows = [
        ("python -c pass (baseline)", bare, None),
        ("import commands + registry", commands, commands / bare),
        ("MCP stdio start -> tools/list", listing, listing / bare),
    ]
    for label, seconds, ratio in rows:
        times = f" ({ratio:4.1f}x baseline)" if ratio else ""
        print(f"{label:<32}: {seconds:6.3f} s{times}")
    print(f"{'heavy SDKs imported at start':<32}: {leaked or 'none'}")
    print(f"{'goal tools/list < 1.5 s':<32}: {'met' if listing < 1.5 else 'NOT met'}")


if __name__ == "__main__":
    main()
