"""Real distributed training through every surface: the Python function, the CLI
script, and MCP clients (the SDK's in-memory client, a stdio subprocess and
streamable HTTP). Each job is a real torchrun with gloo on CPU: 2 processes for the run
that learns, 1 for the runs that compare the surfaces and the failing run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from commands.deploy_training_job import deploy_training_job
from commands.get_training_job import get_training_job
from commands.get_training_job_logs import get_training_job_logs
from mcp_server import build_server
from skills.shared.progress import CollectingProgress
from skills.training_job_deployer.models import JobState
from skills.training_job_deployer.trainer_log import parse_events
from tests.services._common import start_listening

ROOT = Path(__file__).resolve().parents[2]
# The --http server's token, given as a user gives it: in its environment.
HTTP_TOKEN = "local-training-test-token-0123456789"
# Small enough for CI, long enough for the loss to fall clearly (6.30 -> 3.26 in 12
# steps, against the 0.5 asked; a run that did not update its weights stays at 6.3).
FULL_RUN = {"max_steps": 12}
# Runs compared across surfaces: same seed, so the same first loss. One process each: the
# surfaces are the subject (the full run above is the 2-process job).
SHORT_RUN = {"max_steps": 1, "gpu_per_node": 1}
COMPARED = ("status", "steps", "max_steps", "world_size", "target")


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def full_run(runs_dir):
    progress = CollectingProgress()
    result = deploy_training_job(
        job_name="full", runs_dir=str(runs_dir), progress=progress, **FULL_RUN
    )
    return result, progress


def test_two_process_job_runs_to_completion_and_learns(full_run):
    result, _ = full_run
    assert result.status == "succeeded", result.log_tail
    assert result.exit_code == 0
    assert result.world_size == 2 and result.plan.nproc_per_node == 2
    assert result.steps == result.max_steps == FULL_RUN["max_steps"]
    assert result.last_loss < result.first_loss - 0.5
    assert result.tokens_per_s > 0


def test_result_numbers_match_the_log_lines(full_run):
    result, _ = full_run
    events = parse_events(Path(result.log_path).read_text())
    steps = [e for e in events if e["event"] == "step"]
    (summary,) = [e for e in events if e["event"] == "summary"]
    assert result.first_loss == steps[0]["loss"] == summary["first_loss"]
    assert result.last_loss == steps[-1]["loss"] == summary["last_loss"]
    assert result.tokens_per_s == summary["tokens_per_s"]
    assert result.steps == summary["steps"] == steps[-1]["step"]
    assert Path(result.log_path).parent.parent == Path(result.run_dir)


def test_progress_reports_every_logged_step(full_run):
    result, progress = full_run
    logged = [
        e["step"] for e in parse_events(Path(result.log_path).read_text()) if e["event"] == "step"
    ]
    step_reports = [e for e in progress.events if e.completed > 0]
    assert [e.completed for e in step_reports] == logged
    assert all(e.total == result.max_steps for e in step_reports)
    assert "loss" in step_reports[-1].message and "tok/s" in step_reports[-1].message


def test_get_training_job_reads_the_same_state_back(full_run, runs_dir):
    result, _ = full_run
    state = get_training_job(job_name="full", runs_dir=str(runs_dir))
    deploy_only = set(type(result).model_fields) - set(JobState.model_fields)  # plan, ...
    assert deploy_only >= {"plan", "dry_run"}
    assert state.model_dump() == JobState(**result.model_dump(exclude=deploy_only)).model_dump()


def test_get_training_job_logs_returns_the_log_tail(full_run, runs_dir):
    result, _ = full_run
    logs = get_training_job_logs(job_name="full", runs_dir=str(runs_dir), tail_lines=3)
    assert logs.text.splitlines() == Path(result.log_path).read_text().splitlines()[-3:]
    assert logs.lines == 3 and logs.log_path == result.log_path
    done = _cli_tool(
        "get_training_job_logs",
        "--job-name",
        "full",
        "--runs-dir",
        str(runs_dir),
        "--tail-lines",
        "3",
    )
    assert done.returncode == 0 and done.stdout.splitlines() == logs.text.splitlines()


def test_a_failing_run_returns_the_trainer_error_and_log_tail(runs_dir):
    # seq_len beyond the debug model's 512 positions: only the trainer knows its shape.
    result = deploy_training_job(
        job_name="broken", seq_len=4096, runs_dir=str(runs_dir), gpu_per_node=1
    )
    assert result.status == "failed"
    assert result.exit_code != 0
    assert result.error and result.error["event"] == "error"
    assert "max_seq_len" in result.error["message"]
    assert result.log_tail and "max_seq_len" in result.log_tail


# --- the same function through the CLI and MCP -------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return _cli_tool("deploy_training_job", *args)


def _cli_tool(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "commands" / f"{name}.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def cli_result(runs_dir) -> dict:
    done = _cli(
        "--target",
        "local",
        "--job_name",
        "via-cli",
        "--runs-dir",
        str(runs_dir),
        "--max_steps",
        str(SHORT_RUN["max_steps"]),
        "--gpu_per_node",
        str(SHORT_RUN["gpu_per_node"]),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _mcp_arguments(runs_dir: Path, job_name: str) -> dict:
    return {"job_name": job_name, "runs_dir": str(runs_dir), "wait_seconds": 240, **SHORT_RUN}


async def _call_with_progress(client: Client, arguments: dict):
    """The deploy's result, the job's state at its end and every progress report. An MCP
    call's wait is cut to MCP_MAX_WAIT_S: on a loaded machine the job may still be running
    when the deploy returns (seen: 2/2 steps reported, not yet ended), and it is then
    followed as an agent would, with get_training_job through the same client."""
    reports: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, total, message))

    result = await client.call_tool("deploy_training_job", arguments, progress_callback=on_progress)
    final = result.structured_content
    follow = {k: arguments[k] for k in ("job_name", "runs_dir", "wait_seconds")}
    for _ in range(10):
        if result.is_error or not final or final["status"] != "running":
            break
        again = await client.call_tool("get_training_job", follow, progress_callback=on_progress)
        assert not again.is_error, again.content
        final = again.structured_content
    return result, final, reports


def _assert_same_job(mcp_result, final, cli_result: dict, reports) -> None:
    assert not mcp_result.is_error, mcp_result.content
    structured = mcp_result.structured_content
    # Over MCP a started job's result leaves its plan out (the dry run's answer: issue 22).
    assert set(structured) == set(cli_result) - {"plan"}
    assert {k: final[k] for k in COMPARED} == {k: cli_result[k] for k in COMPARED}
    assert final["status"] == "succeeded"
    # Same seed and data: the first step's loss is the same number on every surface.
    assert final["first_loss"] == pytest.approx(cli_result["first_loss"], abs=1e-5)
    assert reports, "no progress notification arrived"
    assert reports[-1][0] == final["steps"] and reports[-1][1] == final["max_steps"]


def test_cli_and_in_memory_mcp_return_the_same_job(runs_dir, cli_result):
    async def scenario():
        async with Client(build_server()) as client:
            return await _call_with_progress(client, _mcp_arguments(runs_dir, "via-mcp"))

    result, final, reports = anyio.run(scenario)
    _assert_same_job(result, final, cli_result, reports)


def test_stdio_mcp_subprocess_returns_the_same_job(runs_dir, cli_result):
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mcp_server", "--workspace", str(runs_dir)],
        cwd=str(ROOT),
    )

    async def scenario():
        async with Client(params) as client:
            return await _call_with_progress(client, _mcp_arguments(runs_dir, "via-stdio"))

    result, final, reports = anyio.run(scenario)
    _assert_same_job(result, final, cli_result, reports)


def test_streamable_http_server_serves_the_same_tools(runs_dir):
    server, port = start_listening(
        lambda port: [sys.executable, "-m", "mcp_server", "--http", "--port", str(port),
                      "--workspace", str(runs_dir)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**os.environ, "FSDP_EKS_MCP_TOKEN": HTTP_TOKEN},
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/mcp"

        async def scenario():
            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {HTTP_TOKEN}"}) as http,
                Client(streamable_http_client(url, http_client=http)) as client,
            ):
                names = [t.name for t in (await client.list_tools()).tools]
                plan = await client.call_tool(
                    "deploy_training_job",
                    {"job_name": "over-http", "runs_dir": str(runs_dir), "dry_run": True},
                )
                return names, plan

        names, plan = anyio.run(scenario)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert "deploy_training_job" in names and "get_training_job" in names
    assert plan.structured_content["status"] == "planned"


# --- bad input on both surfaces ----------------------------------------------

BAD_INPUTS = [
    (["--job_name", "Not_A_Label"], {"job_name": "Not_A_Label"}, "job_name"),
    (["--job_name", "ok", "--num_nodes", "0"], {"job_name": "ok", "num_nodes": 0}, "num_nodes"),
    (["--job_name", "ok", "--target", "mars"], {"job_name": "ok", "target": "mars"}, "target"),
]


@pytest.mark.parametrize(("flags", "_args", "field"), BAD_INPUTS)
def test_cli_bad_input_exits_nonzero_with_message_and_hint(flags, _args, field):
    done = _cli(*flags)
    assert done.returncode == 2
    assert "error [invalid_input]" in done.stderr and field in done.stderr
    assert "hint:" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


@pytest.mark.parametrize(("_flags", "args", "field"), BAD_INPUTS)
def test_mcp_bad_input_is_an_error_result_with_the_code(_flags, args, field):
    async def scenario():
        async with Client(build_server()) as client:
            return await client.call_tool("deploy_training_job", args)

    result = anyio.run(scenario)
    assert result.is_error
    error = json.loads(result.content[0].text)["error"]
    assert error["code"] == "invalid_input" and error["hint"]
    assert field in [p["field"] for p in error["details"]["problems"]]


def test_read_only_server_hides_tools_that_write():
    async def scenario():
        async with Client(build_server(read_only=True)) as client:
            return [t.name for t in (await client.list_tools()).tools]

    # The tools are listed by name; inspect_eks_cluster is the cluster tool's read half.
    assert anyio.run(scenario) == [
        "diagnose_training_job",
        "get_codebuild_build",
        "get_model_server",
        "get_operation",
        "get_training_job",
        "get_training_job_logs",
        "inspect_eks_cluster",
        "list_model_servers",
        "list_operations",
        "list_training_jobs",
    ]
