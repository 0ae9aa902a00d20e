"""Many agents on one `--http` server (issue 35 item 5, issue 49 item 5): 1, 4, 16 and 64
concurrent MCP clients, each in a session of its own, each listing the same 40 local jobs
over and over; p50 and p95 latency, calls/s, and the CPU the server spent per call.

Ours is the server as users start it: `fsdp-eks-mcp --http --port 0`, its token in
FSDP_EKS_MCP_TOKEN, the guard (Host, Origin, bearer token) and the frame check in front,
identical reads shared. The baseline, measured in the same run the same way: the SDK's
bare server (MCPServer, streamable HTTP) listing the same tools (our whole tools/list,
which a client fetches in each session before its first call, to check the result's
outputSchema) and answering the same result (ours, as a client
got it, precomputed: no work of ours), behind the same guard (Guard, GuardedApp, the SDK's
Host/Origin settings): the guard's cost is counted on both sides, so the ratio says what
our own work adds and nothing the guard does.

Fairness in time: both servers run side by side for the whole run and each count is
measured in rounds that alternate which server goes first, so a machine that gets busier
or quieter during the run weighs on both alike; the load average is printed before and
after each count (the machine is shared: a ratio measured loaded says less).

The clients: an MCP client (the SDK: JSON-RPC, pydantic models, outputSchema checks) spends
about three times the server's CPU on a call. One process for 64 clients would measure
that process's event loop, not the server; a process per client is 64 interpreters
(gigabytes, and their starts) fighting for the cores. So the clients are asyncio tasks in
CLIENT_PROCESSES processes (twice the cores this machine has, so the client side can use
every core while a call is in the server), each task its own session and HTTP connection;
the processes are started once and serve every round.

`--quick` (the test suite runs it, to prove the benchmark runs, not to measure): 1 and 2
clients, one call each, one round, 2 client processes. `--clients 16,64 --rounds 2`
measures only those counts; `--from-run DIR` lists copies of DIR, a finished local job's
run directory, instead of training a job first."""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import shutil
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


def _option(name: str, default: str) -> str:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


# `--clients 16,64 --rounds 2`: the counts issue 49 asks about, on a quiet machine, in
# about two minutes (with --from-run, no job trained first).
CLIENTS = [1, 2] if QUICK else [int(n) for n in _option("--clients", "1,4,16,64").split(",")]
# Per count and server, alternating which server goes first.
ROUNDS = 1 if QUICK else int(_option("--rounds", "4"))
GOAL = 1.2  # issue 49: ours within 1.2x of the bare server's p50 at 16 and 64 clients
JOBS = 10 if QUICK else 40
# The job listed (copied JOBS times; --quick: 1 process, its record is all it is for).
STEPS, PROCESSES = (1, 1) if QUICK else (2, 2)
CLIENT_PROCESSES = 2 if QUICK else 4
TOKEN_ENV = "FSDP_EKS_MCP_TOKEN"
SERVING = re.compile(r"serving MCP on http://127\.0\.0\.1:(\d+)/mcp")


def calls_per_client(clients: int) -> int:
    """Enough calls a round for a p95 at every count (64 a round, 5 each at least)."""
    return 1 if QUICK else max(5, 64 // clients)


# The baseline: the SDK's server alone, behind the same guard as ours; tools/list (every
# tool: a client lists them in each session) and the call's result are ours, read from
# files (what our server answered a client); it serves the one tool called.
BARE = """
import json, socket, sys, uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import CallToolResult, Tool
sys.path.insert(0, {root!r})
from mcp_server.http_guard import Guard, GuardedApp, allowed_hosts, server_token

TOOLS = [Tool.model_validate(tool) for tool in json.load(open({tool!r}))]
RESULT = CallToolResult.model_validate(json.load(open({result!r})))

class Bare(MCPServer):
    async def list_tools(self):
        return TOOLS

server = Bare("bare", log_level="ERROR")

@server.tool(name="list_training_jobs")
def list_training_jobs(runs_dir: str) -> CallToolResult:
    return RESULT

sock = socket.create_server(("127.0.0.1", 0))
port = sock.getsockname()[1]
guard = Guard(server_token(None)[0], tuple(allowed_hosts("127.0.0.1", port, ["127.0.0.1"])))
security = TransportSecuritySettings(allowed_hosts=list(guard.hosts),
                                     allowed_origins=list(guard.origins))
app = server.streamable_http_app(host="127.0.0.1", streamable_http_path="/mcp",
                                 transport_security=security)
print(f"bare: serving MCP on http://127.0.0.1:{{port}}/mcp", file=sys.stderr, flush=True)
uvicorn.Server(uvicorn.Config(GuardedApp(app, guard), log_level="warning")).run(sockets=[sock])
"""

# A client process: `connect URL N CALLS` opens N sessions (each its own HTTP connection),
# `go` makes every session call CALLS times, one after another, all sessions at once, and
# prints the latencies; `close` ends the sessions. EOF: exit.
AGENT = """
import json, os, sys, time, anyio, httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

HEADERS = {"Authorization": f"Bearer {os.environ['FSDP_EKS_MCP_TOKEN']}"}

async def session(url, runs, calls, ready, go, out, done):
    async with (httpx2.AsyncClient(headers=HEADERS, timeout=600) as http,
                Client(streamable_http_client(url, http_client=http)) as client):
        ready()
        await go.wait()
        for _ in range(calls):
            begin = time.perf_counter()
            result = await client.call_tool("list_training_jobs", {"runs_dir": runs})
            out.append(time.perf_counter() - begin)
            assert not result.is_error, result
        ready()
        await done.wait()

async def line():
    return await anyio.to_thread.run_sync(sys.stdin.readline)

async def main(runs):
    while command := (await line()).split():
        _, url, count, calls = command
        count, calls = int(count), int(calls)
        go, done, latencies = anyio.Event(), anyio.Event(), []
        seen = [0]
        settled = anyio.Event()
        def ready():
            seen[0] += 1
            if seen[0] % count == 0:
                settled.set()
        async with anyio.create_task_group() as group:
            for _ in range(count):
                group.start_soon(session, url, runs, calls, ready, go, latencies, done)
            await settled.wait()
            print("ready", flush=True)
            await line()  # go
            settled = anyio.Event()
            start, first = time.process_time(), time.time()
            go.set()
            await settled.wait()
            used, last = time.process_time() - start, time.time()
            print(json.dumps([latencies, used, first, last]), flush=True)
            await line()  # close
            done.set()
        print("closed", flush=True)

anyio.run(main, sys.argv[1])
"""


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


class Server:
    """A server process started as a user starts it; `url` once it listens."""

    def __init__(self, name: str, command: list[str], root: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log = root / f"{name}.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen(command, cwd=root, env=env, stderr=log)
        deadline = time.monotonic() + 120
        while (found := SERVING.search(self.log.read_text())) is None:
            assert self.process.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, f"{name} did not start: {self.log.read_text()}"
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{found.group(1)}/mcp"

    def cpu_s(self) -> float:
        """The server's user + system CPU seconds so far (Linux /proc)."""
        stat = Path(f"/proc/{self.process.pid}/stat").read_text()
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


class Agents:
    """CLIENT_PROCESSES client processes, started once (an MCP client's start is mostly
    the SDK's imports), each holding its share of a round's sessions."""

    def __init__(self, runs: Path, env: dict[str, str]) -> None:
        self.procs = [
            subprocess.Popen([sys.executable, "-c", AGENT, str(runs)], env=env,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for _ in range(CLIENT_PROCESSES)
        ]  # fmt: skip

    def _say(self, procs: Sequence[subprocess.Popen], line: str, expect: str | None) -> list[str]:
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(line + "\n")
            proc.stdin.flush()
        answers = []
        for proc in procs:
            assert proc.stdout is not None
            answer = proc.stdout.readline()
            assert answer, f"a client process exited {proc.wait(timeout=60)}"
            assert expect is None or answer.strip() == expect, answer
            answers.append(answer)
        return answers

    def round(self, url: str, clients: int, calls: int) -> tuple[list[float], float]:
        """(every call's latency, the seconds from the first call to the last answer):
        `clients` sessions spread over the processes, connected before any call."""
        procs = self.procs[: min(clients, len(self.procs))]
        shares = [clients // len(procs) + (i < clients % len(procs)) for i in range(len(procs))]
        for proc, share in zip(procs, shares, strict=True):
            self._say([proc], f"connect {url} {share} {calls}", "ready")
        latencies: list[float] = []
        starts, ends = [], []
        for answer in self._say(procs, "go", None):
            times, _cpu, first, last = json.loads(answer)
            latencies += times
            starts.append(first)
            ends.append(last)
        self._say(procs, "close", "closed")
        return latencies, max(ends) - min(starts)

    def end(self) -> None:
        for proc in self.procs:
            _out, _ = proc.communicate(timeout=120)
            assert proc.returncode == 0, proc.returncode


def _our_command() -> list[str]:
    """`fsdp-eks-mcp --http --port 0`: the installed script beside this Python, else the
    module it runs (a source tree not installed)."""
    script = Path(sys.executable).parent / "fsdp-eks-mcp"
    head = [str(script)] if script.exists() else [sys.executable, "-m", "mcp_server"]
    return [*head, "--http", "--port", "0"]


def _our_answer(agents_env: dict[str, str], url: str, runs: Path, root: Path) -> tuple[Path, Path]:
    """Our tools/list and our answer to the call, as a client got them (files the
    baseline serves)."""
    probe = """
import json, os, sys, anyio, httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
async def main(url, runs, tool_path, result_path):
    headers = {"Authorization": f"Bearer {os.environ['FSDP_EKS_MCP_TOKEN']}"}
    async with (httpx2.AsyncClient(headers=headers) as http,
                Client(streamable_http_client(url, http_client=http)) as client):
        tools = (await client.list_tools()).tools
        result = await client.call_tool("list_training_jobs", {"runs_dir": runs})
    dump = dict(mode="json", by_alias=True, exclude_none=True)
    open(tool_path, "w").write(json.dumps([tool.model_dump(**dump) for tool in tools]))
    open(result_path, "w").write(json.dumps(result.model_dump(**dump)))
anyio.run(main, *sys.argv[1:])
"""
    tool, result = root / "tools.json", root / "result.json"
    subprocess.run([sys.executable, "-c", probe, url, str(runs), str(tool), str(result)],
                   env=agents_env, check=True, timeout=300)  # fmt: skip
    return tool, result


def _stats(latencies: list[float], wall: float, cpu: float) -> tuple[float, ...]:
    latencies = sorted(latencies)
    n = len(latencies)
    p95 = latencies[math.ceil(0.95 * n) - 1]  # nearest rank
    return statistics.median(latencies), p95, n / wall, cpu / n


def _load() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        token = secrets.token_urlsafe(32)
        env = {**os.environ, "FSDP_EKS_STATE_DIR": str(root / "state"), TOKEN_ENV: token}
        os.environ["FSDP_EKS_STATE_DIR"] = env["FSDP_EKS_STATE_DIR"]
        runs = _runs(root)
        servers: list[Server] = []
        agents = None
        try:
            ours = Server("ours", _our_command(), root, env)
            servers.append(ours)
            tool, result = _our_answer(env, ours.url, runs, root)
            code = BARE.format(root=str(ROOT), tool=str(tool), result=str(result))
            bare = Server("bare", [sys.executable, "-c", code], root, env)
            servers.append(bare)
            agents = Agents(runs, env)
            if not QUICK:  # warm: each client process's first session, both servers
                for server in (bare, ours):
                    agents.round(server.url, CLIENT_PROCESSES, 1)
            loads = [f"before: {_load()}"]
            out: dict[str, dict[int, tuple[float, ...]]] = {"ours": {}, "bare": {}}
            for clients in CLIENTS:
                pooled: dict[str, tuple[list[float], float, float]] = {
                    "ours": ([], 0.0, 0.0),
                    "bare": ([], 0.0, 0.0),
                }
                for n in range(ROUNDS):
                    for server in (bare, ours) if n % 2 == 0 else (ours, bare):
                        cpu = server.cpu_s()
                        latencies, wall = agents.round(server.url, clients,
                                                       calls_per_client(clients))  # fmt: skip
                        cpu = server.cpu_s() - cpu
                        kept, walls, cpus = pooled[server.name]
                        pooled[server.name] = (kept + latencies, walls + wall, cpus + cpu)
                for name, (kept, walls, cpus) in pooled.items():
                    out[name][clients] = _stats(kept, walls, cpus)
                loads.append(f"after {clients}: {_load()}")
        finally:
            if agents is not None:
                agents.end()
            for server in servers:
                server.stop()
    _report(out, loads)


def _report(out: dict[str, dict[int, tuple[float, ...]]], loads: list[str]) -> None:
    rounds = f"{ROUNDS} round{'s' * (ROUNDS > 1)}"
    print(f"list_training_jobs over --http, {JOBS} jobs, {CLIENT_PROCESSES} client processes,"
          f" {rounds} a count, alternating the server first")  # fmt: skip
    print("ours: fsdp-eks-mcp --http (token, guard, frame check, shared reads); bare: the"
          " SDK's server, the same guard, tools/list and result precomputed")  # fmt: skip
    print(
        " clients | ours: p50 ms  p95 ms  calls/s  server CPU ms a call"
        " | bare: p50 ms  p95 ms  calls/s  server CPU ms a call | ours / bare p50"
    )
    for clients in CLIENTS:
        o, b = out["ours"][clients], out["bare"][clients]
        print(f" {clients:>7} | {o[0] * 1000:12.1f} {o[1] * 1000:7.1f} {o[2]:8.1f}"
              f" {o[3] * 1000:20.2f} | {b[0] * 1000:12.1f} {b[1] * 1000:7.1f} {b[2]:8.1f}"
              f" {b[3] * 1000:20.2f} | {o[0] / b[0]:.2f}x")  # fmt: skip
    for clients in CLIENTS:
        ratio = out["ours"][clients][0] / out["bare"][clients][0]
        verdict = "within" if ratio <= GOAL else "over"
        print(f"at {clients} clients: ours / bare p50 {ratio:.2f}x, {verdict} {GOAL}x; server "
              f"CPU a call ours {out['ours'][clients][3] * 1000:.2f} ms, bare "
              f"{out['bare'][clients][3] * 1000:.2f} ms")  # fmt: skip
    print(f"load average (1, 5, 15 min) {'; '.join(loads)}")
    first, last = CLIENTS[0], CLIENTS[-1]
    print(
        f"growth of p50 from {first} to {last} clients: ours "
        f"{out['ours'][last][0] / out['ours'][first][0]:.1f}x, baseline "
        f"{out['bare'][last][0] / out['bare'][first][0]:.1f}x"
    )


if __name__ == "__main__":
    main()
