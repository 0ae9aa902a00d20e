"""The job tools at their edges, with real torchrun jobs: the cancel tool and
its confirm gate, Ctrl-C on a CLI deploy that follows its job, gradient accumulation,
list_training_jobs, and the read-only MCP server as a process."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from commands.cancel_training_job import cancel_training_job
from commands.deploy_training_job import DeployResult, deploy_training_job
from commands.get_training_job import get_training_job
from commands.list_training_jobs import list_training_jobs
from skills.operations import processes
from skills.shared.errors import ToolFailure
from skills.training_job_deployer.models import JobState
from skills.training_job_deployer.trainer_log import parse_events

ROOT = Path(__file__).resolve().parents[2]
ENDLESS = {"max_steps": 100_000, "checkpoint_freq": 0}
ACCUM = {"grad_accum_steps": 2, "train_batch_size": 2}
# The Ctrl-C job is about the CLI that follows it, not a group of ranks: one process (a
# rank is a torch start, issue 36). The cancel tool's job keeps 2 (its checkpoint on
# cancel is every rank's), and it is also the gradient accumulation job (the global
# batch it implies counts the ranks).


def _wait_for_step(log_path: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log_path.read_text() if log_path.exists() else ""
        if any(e["event"] == "step" for e in parse_events(text)):
            return
        time.sleep(0.2)
    raise AssertionError(f"no step logged in {timeout} s:\n{text[-2000:]}")


def _wait_for_trainer(run_dir: Path, timeout: float = 120.0) -> None:
    """Until the record names the job's torchrun and its log exists."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, KeyError):
            if (
                json.loads((run_dir / "job.json").read_text())["trainer"]
                and (run_dir / "logs" / "attempt-1.log").exists()
            ):
                return
        time.sleep(0.1)
    raise AssertionError(f"no trainer recorded in {timeout} s in {run_dir}")


def _torchrun_pid(run_dir: Path) -> tuple[int, float]:
    trainer = json.loads((run_dir / "job.json").read_text())["trainer"]
    return trainer["pid"], trainer["started"]


@dataclass(frozen=True)
class CancelledAccumJob:
    started: DeployResult
    gate: ToolFailure | None  # what cancel without confirm raised (None: it went through)
    running_after_gate: str
    cancelled: JobState
    torchrun: tuple[int, float]
    listed: list[tuple[str, str]]


@pytest.fixture(scope="module")
def cancelled_accum_job(tmp_path_factory) -> CancelledAccumJob:
    """One endless 2-rank job with gradient accumulation, cancelled through the tool once
    a step is logged: the cancel tool's test and the gradient accumulation test read it
    (one 2-rank job instead of two: each rank is a torch start, issue 36)."""
    runs = str(tmp_path_factory.mktemp("accum-cancel"))
    started = deploy_training_job(
        job_name="to-cancel", runs_dir=runs, wait_seconds=0, **ENDLESS, **ACCUM
    )
    try:
        _wait_for_step(Path(started.log_path))
        gate = None
        try:
            cancel_training_job(job_name="to-cancel", runs_dir=runs)
        except ToolFailure as refused:
            gate = refused
        running = get_training_job(job_name="to-cancel", runs_dir=runs).status
    finally:
        cancelled = cancel_training_job(job_name="to-cancel", runs_dir=runs, confirm=True)
    listed = [(j.job_name, j.status) for j in list_training_jobs(runs_dir=runs).jobs]
    torchrun = _torchrun_pid(Path(runs) / "to-cancel")
    return CancelledAccumJob(started, gate, running, cancelled, torchrun, listed)


def test_cancel_tool_needs_confirm_then_stops_the_job_with_a_checkpoint(cancelled_accum_job):
    job = cancelled_accum_job
    assert job.started.status == "running"
    assert job.gate is not None, "cancel without confirm went through"
    assert job.gate.code == "confirmation_required" and job.gate.exit_status == 2
    assert job.running_after_gate == "running"

    state = job.cancelled
    assert state.status == "cancelled"
    assert state.checkpoint_step is not None and state.checkpoint_step >= 1
    assert f"checkpoint saved at step {state.checkpoint_step}" in state.message
    assert not processes.is_alive(*job.torchrun)
    assert job.listed == [("to-cancel", "cancelled")]


def test_ctrl_c_on_a_following_cli_deploy_stops_the_job(tmp_path):
    cli = subprocess.Popen(
        [sys.executable, str(ROOT / "commands" / "deploy_training_job.py"),
         "--job_name", "interrupted", "--runs_dir", str(tmp_path),
         "--max_steps", str(ENDLESS["max_steps"]), "--checkpoint_freq", "0",
         "--gpu_per_node", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        # A terminal's foreground CLI takes SIGINT as KeyboardInterrupt; a test run started
        # in the background (`make test &`) ignores SIGINT, and its children would inherit
        # that (Python keeps an ignored SIGINT ignored).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        # The CLI that follows is the subject, not the ranks' training: the record naming
        # torchrun is enough (a step would add a rank's torch start, issue 36).
        _wait_for_trainer(tmp_path / "interrupted")
        cli.send_signal(signal.SIGINT)  # what a terminal's Ctrl-C sends the foreground CLI
        # The CLI's stop waits out the ranks' grace (30 s) at most; a loaded machine adds.
        _, err = cli.communicate(timeout=180)
    finally:
        if cli.poll() is None:
            cli.kill()
            # Whatever failed, the endless job does not outlive the test.
            cancel_training_job(job_name="interrupted", runs_dir=str(tmp_path), confirm=True)
    assert cli.returncode == 130 and "interrupted" in err
    assert "Traceback" not in err
    state = get_training_job(job_name="interrupted", runs_dir=str(tmp_path))
    assert state.status == "cancelled"
    pid, started_at = _torchrun_pid(tmp_path / "interrupted")
    assert not processes.is_alive(pid, started_at)


def test_gradient_accumulation_runs_with_the_global_batch_it_implies(cancelled_accum_job):
    started, state = cancelled_accum_job.started, cancelled_accum_job.cancelled
    argv = started.plan.argv
    assert argv[argv.index("--grad_accum_steps") + 1] == "2"
    events = parse_events(Path(state.log_path).read_text())
    (start,) = [e for e in events if e["event"] == "start"]
    assert start["world_size"] == 2
    assert start["grad_accum_steps"] == 2
    assert start["global_batch_size"] == 2 * 2 * start["world_size"]  # batch x accum x ranks
    # It trained with it: steps with a loss, up to the one its cancel checkpointed.
    steps = [e for e in events if e["event"] == "step"]
    assert steps and all(e["loss"] is not None for e in steps), events
    assert state.steps >= 1 and state.last_loss is not None


def test_read_only_server_process_serves_only_tools_that_change_nothing():
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "mcp_server", "--read-only"], cwd=str(ROOT),
        env=dict(os.environ),
    )  # fmt: skip

    async def scenario():
        async with Client(params) as client:
            tools = (await client.list_tools()).tools
            refused = await client.call_tool("deploy_training_job", {"job_name": "x"})
            return tools, refused

    tools, refused = anyio.run(scenario)
    assert tools and all(t.annotations.read_only_hint for t in tools)
    assert {t.name for t in tools} == {
        "get_training_job", "get_training_job_logs", "list_training_jobs",
        "diagnose_training_job",
        "get_operation", "list_operations", "get_codebuild_build", "inspect_eks_cluster",
        "get_model_server", "list_model_servers",
    }  # fmt: skip
    assert refused.is_error
