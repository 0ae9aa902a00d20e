"""Many agents on one `--http` server (issue 35 item 5): 1, 4 and 16 concurrent MCP
clients, each its own process and session (as agents are), each listing the same 40
local jobs 5 times; p50 and p95 latency, calls/s, and the CPU the server and the clients
spent per call, with identical reads shared (the server as shipped) and without (each
call computed: what it did before), both measured in this run against a server in its
own process.

The CPU per call says where the time goes: the server's share is a few ms a call; an
MCP client (the SDK: JSON-RPC, pydantic models, outputSchema checks) costs more than
that, which is why the clients run as processes of their own here (16 clients in one
process measured that process, not the server).

The baseline, measured in the same run the same way: a bare MCP server of the SDK with one
tool that returns the same result, precomputed (no work of ours). Its latency grows with
the clients too: on a machine with few cores the client processes themselves compete
for them. Our server's ratio to the baseline at each count says what our own work adds;
a ratio that stays level as clients grow means our server adds no contention of its own.

`--quick` (the test suite runs it, to prove the benchmark runs, not to measure): 1 and 2
clients, one call each, no warm-up client, each way; 2 client processes per server serve
both counts, a new session each time."""

from __future__ import annotations

import json
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._from_run import finished_job  # noqa: E402

QUICK = "--quick" in sys.argv
CLIENTS = [1, 2] if QUICK else [1, 4, 16]
CALLS = 1 if QUICK else 5
JOBS = 10 if QUICK else 40
# The job listed (copied JOBS times; --quick: 1 process, its record is all it is for).
STEPS, PROCESSES = (1, 1) if QUICK else (2, 2)

SERVE = """
import sys, uvicorn
sys.path.insert(0, {root!r})
from mcp_server import build_server
server = build_server()
if {unshared}:
    server._shares = lambda spec: False
uvicorn.run(server.streamable_http_app(host="127.0.0.1"), host="127.0.0.1", port={port},
            log_level="error")
"""


# The baseline: the SDK's server alone, answering the same tool with the same structured
# result, read from a file (what our list returned), so only the transport and the
# SDK's per-call work remain.
BARE = """
import json, sys, uvicorn
from typing import Any
from mcp.server.mcpserver import MCPServer
PAYLOAD = json.load(open({payload!r}))
server = MCPServer("bare", log_level="ERROR")

@server.tool()
def list_training_jobs(runs_dir: str) -> dict[str, Any]:
    return PAYLOAD

uvicorn.run(server.streamable_http_app(host="127.0.0.1"), host="127.0.0.1", port={port},
            log_level="error")
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _runs(root: Path) -> Path:
    runs = root / "runs"
    finished_job(runs, "job-0", steps=STEPS, processes=PROCESSES)  # or --from-run's copy
    for i in range(1, JOBS):
        copy = runs / f"job-{i}"
        shutil.copytree(runs / "job-0", copy)
        record = json.loads((copy / "job.json").read_text())
        record["job_name"] = copy.name
        (copy / "job.json").write_text(json.dumps(record))
    return runs


AGENT = """
import json, sys, time, anyio
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

async def agent(url, runs, calls):
    for _ in iter(sys.stdin.readline, ""):  # "connect": a session of its own (EOF: done)
        async with Client(streamable_http_client(url)) as client:
            print("ready", flush=True)
            sys.stdin.readline()  # every agent connected: go together
            start, first = time.process_time(), time.time()
            latencies = []
            for _ in range(calls):
                begin = time.perf_counter()
                result = await client.call_tool("list_training_jobs", {"runs_dir": runs})
                latencies.append(time.perf_counter() - begin)
                assert not result.is_error, result
            used = time.process_time() - start
            print(json.dumps([latencies, used, first, time.time()]), flush=True)

anyio.run(agent, sys.argv[1], sys.argv[2], int(sys.argv[3]))
"""


def _agent_processes(url: str, count: int, runs: Path, calls: int) -> list[subprocess.Popen]:
    return [
        subprocess.Popen([sys.executable, "-c", AGENT, url, str(runs), str(calls)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(count)
    ]  # fmt: skip


def _say(proc: subprocess.Popen, line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def _agents(
    url: str, clients: int, runs: Path, calls: int = CALLS, pool: Sequence[subprocess.Popen] = ()
) -> tuple[list[float], float, float]:
    """Each agent a process of its own, in a session of its own, connected before any
    calls; (every call's latency, the clients' CPU seconds in their calls, the seconds
    from the first call to the last answer). Fresh processes, ended after, unless a
    `pool` of started ones is given (--quick: see _measure)."""
    procs = list(pool[:clients]) or _agent_processes(url, clients, runs, calls)
    for proc in procs:
        _say(proc, "connect")
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    for proc in procs:
        _say(proc, "go")
    latencies: list[float] = []
    cpu, starts, ends = 0.0, [], []
    for proc in procs:
        assert proc.stdout is not None
        out = proc.stdout.readline()
        assert out, f"agent exited {proc.wait(timeout=60)}"
        times, used, first, last = json.loads(out)
        latencies += times
        cpu += used
        starts.append(first)
        ends.append(last)
    if not pool:
        _end(procs)
    return latencies, cpu, max(ends) - min(starts)


def _end(procs: Sequence[subprocess.Popen]) -> None:
    """EOF on each agent's stdin ends it; each must exit 0."""
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, out


def _cpu_s(pid: int) -> float:
    """A process's user + system CPU seconds so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _payload(runs: Path, root: Path) -> Path:
    """Our list's structured result for these jobs, as the baseline returns it."""
    from commands.list_training_jobs import list_training_jobs

    path = root / "payload.json"
    result = list_training_jobs(runs_dir=str(runs))
    path.write_text(json.dumps(result.model_dump(mode="json", exclude_none=True)))
    return path


def _measure(runs: Path, state: Path, code: str, port: int) -> dict[int, tuple[float, ...]]:
    env = {**os.environ, "FSDP_EKS_STATE_DIR": str(state)}
    server = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/mcp"
        if not QUICK:
            _agents(url, 1, runs, 1)  # warm: the tool's module is imported once
        # --quick: the largest count's agent processes, started once, serve every count
        # (each in a new session); a process's start (the MCP SDK's imports) is most of
        # what a client costs. Measured (not --quick): fresh processes for each count.
        pool = _agent_processes(url, CLIENTS[-1], runs, CALLS) if QUICK else []
        out = {}
        for clients in CLIENTS:
            server_cpu = _cpu_s(server.pid)  # connecting costs it little: counted in
            latencies, client_cpu, wall = _agents(url, clients, runs, pool=pool)
            server_cpu = _cpu_s(server.pid) - server_cpu
            latencies.sort()
            n = len(latencies)
            p95 = latencies[math.ceil(0.95 * n) - 1]  # nearest rank
            out[clients] = (statistics.median(latencies), p95, n / wall,
                            server_cpu / n, client_cpu / n)  # fmt: skip
        _end(pool)
        return out
    finally:
        server.terminate()
        server.wait(10)


def _ours(runs: Path, state: Path, unshared: bool) -> dict[int, tuple[float, ...]]:
    port = _free_port()
    return _measure(runs, state, SERVE.format(root=str(ROOT), unshared=unshared, port=port), port)


def _bare(runs: Path, state: Path, payload: Path) -> dict[int, tuple[float, ...]]:
    port = _free_port()
    return _measure(runs, state, BARE.format(payload=str(payload), port=port), port)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["FSDP_EKS_STATE_DIR"] = str(root / "state")
        runs = _runs(root)
        bare = _bare(runs, root / "state", _payload(runs, root))
        shared = _ours(runs, root / "state", unshared=False)
        alone = _ours(runs, root / "state", unshared=True)
    print(f"list_training_jobs over --http, {JOBS} jobs, {CALLS} calls per client process")
    print(
        " clients | shared: p50 ms  p95 ms  calls/s  server/client CPU ms a call"
        " | each computed: p50 ms  p95 ms  calls/s  server/client CPU ms a call"
    )
    for clients in CLIENTS:
        s, a = shared[clients], alone[clients]
        print(f" {clients:>7} | {s[0] * 1000:14.0f} {s[1] * 1000:7.0f} {s[2]:8.1f}"
              f" {s[3] * 1000:13.1f} / {s[4] * 1000:.1f} |"
              f" {a[0] * 1000:21.0f} {a[1] * 1000:7.0f} {a[2]:8.1f}"
              f" {a[3] * 1000:13.1f} / {a[4] * 1000:.1f}")  # fmt: skip
    print("baseline: the SDK's bare server, the same result precomputed")
    print(" clients | p50 ms  p95 ms  calls/s  server/client CPU ms a call | ours (shared)"
          " / baseline p50")  # fmt: skip
    for clients in CLIENTS:
        b, s = bare[clients], shared[clients]
        print(f" {clients:>7} | {b[0] * 1000:6.0f} {b[1] * 1000:7.0f} {b[2]:8.1f}"
              f" {b[3] * 1000:13.1f} / {b[4] * 1000:.1f} | {s[0] / b[0]:.2f}x")  # fmt: skip
    first, last = CLIENTS[0], CLIENTS[-1]
    print(
        f"growth of p50 from {first} to {last} clients: ours "
        f"{shared[last][0] / shared[first][0]:.1f}x, baseline "
        f"{bare[last][0] / bare[first][0]:.1f}x"
    )


if __name__ == "__main__":
    main()
