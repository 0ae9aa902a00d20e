"""What an agent pays for and gets from the server (issue 22): the size of tools/list,
each target's settings as one object, results that say things once and stay small,
a listing that needs no tool module, and calls that never block each other."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import anyio
import pytest
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from commands import all_tools, tool_spec
from mcp_server import build_server, listing
from mcp_server.lean import bounded_tail, dedupe_lines, lean_data
from mcp_server.server import structured, summary_text
from skills.shared.next_step import NextStep
from skills.shared.progress import Progress
from skills.shared.results import ToolResult
from skills.shared.tooling import spec_of, tool
from skills.training_job_deployer.job_spec import JobSpec
from skills.training_job_deployer.models import JobState
from skills.training_job_deployer.targets.local.target import LocalSettings, LocalTarget
from skills.training_job_deployer.targets.registry import DeployResult

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# Budgets (issue 22): what every agent session pays before any work.
LISTING_BUDGET = 25 * 1024
TOOL_BUDGET = 4 * 1024
RESULT_BUDGET = 40 * 1024


def _wire(value: object) -> int:
    """Bytes as the server writes them (compact JSON, wire names)."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def _listed() -> list[dict]:
    async def scenario():
        async with Client(build_server()) as client:
            return (await client.list_tools()).tools

    tools = anyio.run(scenario)
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]


def test_tools_list_fits_its_budget_in_total_and_per_tool():
    tools = _listed()
    sizes = {t["name"]: _wire(t) for t in tools}
    assert len(tools) == len(all_tools())
    assert _wire({"tools": tools}) <= LISTING_BUDGET, sizes
    assert max(sizes.values()) <= TOOL_BUDGET, sizes


def test_each_targets_settings_are_one_object_that_validates_as_the_flat_fields(tmp_path):
    deploy = next(t for t in _listed() if t["name"] == "deploy_training_job")
    properties = deploy["inputSchema"]["properties"]
    assert "cluster_name" not in properties and "ssh_host" not in properties
    assert "cluster_name" in properties["kubernetes"]["properties"]
    base = {"job_name": "nest", "dry_run": True, "image_uri": "r.invalid/t:1"}

    async def scenario():
        async with Client(build_server()) as client:
            nested = await client.call_tool("deploy_training_job", {
                **{k: v for k, v in base.items() if k != "image_uri"},
                "kubernetes": {"kubeconfig": str(tmp_path / "kc"), "image_uri": "r.invalid/t:1"},
            })  # fmt: skip
            flat = await client.call_tool("deploy_training_job", {
                **base, "target": "kubernetes", "kubeconfig": str(tmp_path / "kc"),
            })  # fmt: skip
            stray = await client.call_tool(
                "deploy_training_job", {**base, "kubernetes": {"partition": "gpu"}}
            )
            not_object = await client.call_tool("get_training_job", {"job_name": "x", "slurm": 3})
            return nested, flat, stray, not_object

    nested, flat, stray, not_object = anyio.run(scenario)
    assert not nested.is_error, nested.content[0].text
    assert nested.structured_content == flat.structured_content
    assert nested.structured_content["target"] == "kubernetes"  # implied by the object
    for refused, field in ((stray, "kubernetes.partition"), (not_object, "slurm")):
        error = json.loads(refused.content[0].text)["error"]
        assert refused.is_error and error["code"] == "invalid_input" and field in error["message"]


def test_the_listing_is_cached_by_the_sources_hash(tmp_path, monkeypatch):
    monkeypatch.setenv(listing.CACHE_DIR_ENV, str(tmp_path))
    fresh = listing.entries_of(all_tools())
    assert listing.cached_entries() == fresh  # computed, then written
    (written,) = tmp_path.iterdir()
    assert written.name == f"tools-{listing.sources_hash()}.json"
    written.write_text(json.dumps([{**fresh[0], "description": "from the cache"}]))
    assert listing.cached_entries()[0]["description"] == "from the cache"
    monkeypatch.setattr(listing, "sources_hash", lambda: "changed")
    assert listing.cached_entries() == fresh  # a changed source: computed again


def test_a_start_imports_no_tool_module_until_its_first_call(tmp_path):
    script = (
        "import sys, anyio\n"
        "from mcp import Client\n"
        "from mcp_server import build_server\n"
        "build_server()\n"  # the first start fills the cache
        "for m in [m for m in sys.modules if m.startswith(('commands', 'skills.'))]:\n"
        "    del sys.modules[m]\n"
        "server = build_server()\n"
        "tools = [m for m in sys.modules if m.startswith('commands.')]\n"
        "async def call():\n"
        "    async with Client(server) as c:\n"
        "        await c.call_tool('list_operations', {})\n"
        "anyio.run(call)\n"
        "print(tools, sorted(m for m in sys.modules if m.startswith('commands.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**_env(tmp_path)}, check=True,
    )  # fmt: skip
    at_start, after_call = done.stdout.strip().split("] [")
    assert at_start == "["
    assert "commands.list_operations" in after_call and "deploy_training_job" not in after_call


def _env(tmp_path: Path) -> dict[str, str]:
    import os

    return {
        **os.environ,
        listing.CACHE_DIR_ENV: str(tmp_path / "cache"),
        "FSDP_EKS_STATE_DIR": str(tmp_path / "state"),
    }


# --- lean results ----------------------------------------------------------------------


def test_a_tail_is_bounded_and_says_a_repeated_line_once():
    run = "RUN pip install " + "x" * 224
    assert dedupe_lines(["a", run, run, run, "b", "b"]) == ["a", f"{run} (x3)", "b (x2)"]
    tail = bounded_tail([f"line {i}" for i in range(10_000)])
    assert len(tail) <= 60 and tail[-1] == "line 9999"
    assert len(bounded_tail("y" * 100_000)) <= 6_000


def test_a_started_jobs_result_leaves_the_plan_to_the_dry_run():
    plan = LocalTarget(LocalSettings()).plan(JobSpec(job_name="p"))
    started = DeployResult(job_name="p", target="local", status="running", plan=plan)
    assert "plan" not in structured(started)
    planned = started.model_copy(update={"status": "planned", "dry_run": True})
    assert structured(planned)["plan"]["argv"] == plan.argv


def test_the_largest_realistic_results_are_small_and_said_once(tmp_path):
    """A failed job with a 100k-line log, a dry run's full plan (local, a 64-node PyTorchJob), and
    the data under 40 KB, and the text a
    summary, not the data's JSON again. (The logs tool's result is bounded by its own
    `lines` input; a build's log tail by lean_data, tested above.)"""
    log = "\n".join(f"[rank {i % 64}] step {i} loss 2.3 NCCL WARN retrying" for i in range(100_000))
    failed = JobState(
        job_name="j", target="kubernetes", status="failed", steps=10, log_tail=log,
        message="NCCL timeout",
        next_step=NextStep(tool="diagnose_training_job", arguments={"job_name": "j"}),
    )  # fmt: skip
    data = lean_data(failed.model_dump(mode="json"))
    assert _wire(data) < RESULT_BUDGET
    text = summary_text(failed)
    assert len(text.encode()) < RESULT_BUDGET and json.dumps(data) not in text
    assert "failed" in text and "diagnose_training_job" in text

    async def plans():
        async with Client(build_server()) as client:
            return [
                await client.call_tool(
                    "deploy_training_job",
                    {
                        "job_name": "big",
                        "dry_run": True,
                        **settings,
                    },
                )  # fmt: skip
                for settings in (
                    {"local": {"runs_dir": str(tmp_path)}, "gpu_per_node": 2},
                    {
                        "num_nodes": 64,
                        "gpu_per_node": 8,
                        "kubernetes": {"kubeconfig": str(tmp_path / "kc"), "image_uri": "r/t:1"},
                    },
                    # (a Slurm plan asks sinfo: test_slurm_target has the cluster)
                )
            ]

    for result in anyio.run(plans):
        assert not result.is_error, result.content[0].text
        assert _wire(result.structured_content) < RESULT_BUDGET
        assert result.content[0].text != json.dumps(result.structured_content, indent=2)


# --- concurrency -----------------------------------------------------------------------

RELEASE = threading.Event()


class Held(ToolResult):
    held: bool = True


@tool(read_only=True)
def long_build(*, progress: Progress | None = None) -> Held:
    """Stands for a long build: holds its worker thread until released."""
    if not RELEASE.wait(timeout=60):
        raise RuntimeError("never released")
    return Held()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_twenty_reads_over_http_all_answer_while_a_long_call_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("FSDP_EKS_STATE_DIR", str(tmp_path / "state"))
    specs = [spec_of(long_build), tool_spec("list_operations"), tool_spec("list_training_jobs")]
    port = _free_port()
    app = build_server(specs=specs).streamable_http_app(host="127.0.0.1")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    RELEASE.clear()
    url = f"http://127.0.0.1:{port}/mcp"

    async def scenario():
        while not server.started:
            await anyio.sleep(0.05)
        async with Client(streamable_http_client(url)) as client:
            results: dict[str, object] = {}

            async def read(i: int) -> None:
                name = "list_operations" if i % 2 else "list_training_jobs"
                args = {} if i % 2 else {"runs_dir": str(tmp_path / "runs")}
                results[f"read {i}"] = await client.call_tool(name, args)

            async with anyio.create_task_group() as group:
                group.start_soon(_hold, client, results)
                await anyio.sleep(0.2)  # the long call holds its thread
                started = time.monotonic()
                with anyio.fail_after(30):
                    async with anyio.create_task_group() as reads:
                        for i in range(20):
                            reads.start_soon(read, i)
                results["reads_s"] = time.monotonic() - started
                results["long still running"] = "long" not in results
                RELEASE.set()
            return results

    try:
        results = anyio.run(scenario)
    finally:
        RELEASE.set()
        server.should_exit = True
        thread.join(timeout=10)
    reads = [v for k, v in results.items() if k.startswith("read ")]
    assert len(reads) == 20 and not any(r.is_error for r in reads)
    assert results["long still running"] and not results["long"].is_error


async def _hold(client: Client, results: dict[str, object]) -> None:
    results["long"] = await client.call_tool("long_build", {})


def test_a_json_looking_string_is_a_string_and_never_an_untyped_error(tmp_path):
    """The fuzz's old intermittent failure (2 of 32 runs): the SDK pre-parses a string
    argument that is valid JSON ('[]', '{"a": 1}') into a list or dict for any field not
    typed exactly `str` (a Claude Desktop workaround), then validated the call a second
    time against the function's signature and answered with untyped text ('Error
    executing tool ...'). Hypothesis only now and then draws a text that is a JSON array
    or object. Calls now validate once, through the tool's own model, as sent."""

    async def scenario():
        async with Client(build_server()) as client:
            return [
                await client.call_tool(
                    "deploy_training_job",
                    {
                        "job_name": "js",
                        "dry_run": True,
                        "dataset": text,
                        "gpu_per_node": 2,
                        "local": {"runs_dir": str(tmp_path)},
                    },
                )  # fmt: skip
                for text in ("[]", '{"a": 1}', "[1, 2]", "null")
            ]

    for result in anyio.run(scenario):
        text = result.content[0].text
        assert "Error executing tool" not in text
        if result.is_error:  # a typed refusal of the string itself, never of a list
            assert json.loads(text)["error"]["code"]
        else:
            assert result.structured_content["plan"]["argv"]
