"""Many agents on one `--http` server (issue 35 item 5): 1, 4 and 16 concurrent MCP
clients, each its own session, each listing the same 40 local jobs 5 times; p50 and p95
latency and calls/s, with identical reads shared (the server as shipped) and without
(each call computed: what it did before), both measured in this run against a server
in its own process.

`--quick` runs 1 and 4 clients once each way (the test suite runs it)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QUICK = "--quick" in sys.argv
CLIENTS = [1, 4] if QUICK else [1, 4, 16]
CALLS = 2 if QUICK else 5
JOBS = 10 if QUICK else 40

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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _runs(root: Path) -> Path:
    from commands.deploy_training_job import deploy_training_job

    runs = root / "runs"
    deploy_training_job(job_name="job-0", runs_dir=str(runs), max_steps=2)
    for i in range(1, JOBS):
        copy = runs / f"job-{i}"
        shutil.copytree(runs / "job-0", copy)
        record = json.loads((copy / "job.json").read_text())
        record["job_name"] = copy.name
        (copy / "job.json").write_text(json.dumps(record))
    return runs


async def _agents(url: str, clients: int, runs: Path) -> list[float]:
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    latencies: list[float] = []

    async def agent() -> None:
        async with Client(streamable_http_client(url)) as client:
            for _ in range(CALLS):
                start = time.perf_counter()
                result = await client.call_tool("list_training_jobs", {"runs_dir": str(runs)})
                latencies.append(time.perf_counter() - start)
                assert not result.is_error, result

    async with anyio.create_task_group() as group:
        for _ in range(clients):
            group.start_soon(agent)
    return latencies


def _measure(runs: Path, state: Path, unshared: bool) -> dict[int, tuple[float, float, float]]:
    port = _free_port()
    code = SERVE.format(root=str(ROOT), unshared=unshared, port=port)
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
        anyio.run(_agents, url, 1, runs)  # warm: the tool's module is imported once
        out = {}
        for clients in CLIENTS:
            start = time.perf_counter()
            latencies = sorted(anyio.run(_agents, url, clients, runs))
            wall = time.perf_counter() - start
            p95 = latencies[int(0.95 * (len(latencies) - 1))]
            out[clients] = (statistics.median(latencies), p95, len(latencies) / wall)
        return out
    finally:
        server.terminate()
        server.wait(10)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["FSDP_EKS_STATE_DIR"] = str(root / "state")
        runs = _runs(root)
        shared = _measure(runs, root / "state", unshared=False)
        alone = _measure(runs, root / "state", unshared=True)
    print(f"list_training_jobs over --http, {JOBS} jobs, {CALLS} calls per client")
    print(" clients | shared: p50 ms  p95 ms  calls/s | each computed: p50 ms  p95 ms  calls/s")
    for clients in CLIENTS:
        s, a = shared[clients], alone[clients]
        print(f" {clients:>7} | {s[0] * 1000:14.0f} {s[1] * 1000:7.0f} {s[2]:8.1f} |"
              f" {a[0] * 1000:21.0f} {a[1] * 1000:7.0f} {a[2]:8.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
