"""The Slurm target on a real one-node Slurm (munge + slurmctld + slurmd): real sbatch,
srun and a real torchrun (2 processes, gloo on CPU; the requeued job 1). Through the CLI to
succeeded; get, logs and list; `scontrol requeue` mid-run (the trainer checkpoints on
SIGTERM, the job runs again and resumes); one endless job whose paused rank the
watchdog names the straggler with its node, then cancelled; and the scheduler's
refusals as typed errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import ListRootsResult, Root

from commands.cancel_training_job import cancel_training_job
from commands.deploy_training_job import deploy_training_job
from commands.get_training_job import get_training_job
from commands.get_training_job_logs import get_training_job_logs
from commands.list_training_jobs import list_training_jobs
from mcp_server import build_server
from mcp_server.workspace import Workspace
from skills.shared.errors import ToolFailure
from skills.shared.progress import CollectingProgress
from skills.training_job_deployer.trainer_log import parse_events
from tests.integration.test_long_runs import JOB, marked_process, pausing, stop_job, wait_for
from tests.services.slurm import SHORT_PARTITION

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SECRET = "hf_" + "Zx9" * 12
# Quoted into the script's shell body, and a real directory the trainer writes to.
HOSTILE_DIR = "ck $(touch PWNED) `touch PWNED2`;touch PWNED3"
# The CLI job's steps: 12, as the local 2-rank learning run (test_local_training's
# FULL_RUN), which proves the same trainer's loss falls by 0.5 in them (issue 36: was 20).
CLI_STEPS = 12


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("slurm-runs")


def _slurm(runs: Path) -> dict[str, str]:
    return {"target": "slurm", "runs_dir": str(runs)}


def _wait_for_step(log: Path, timeout: float = 120.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        events = parse_events(log.read_text()) if log.exists() else []
        if any(e["event"] == "step" for e in events):
            return events
        time.sleep(0.2)
    raise AssertionError(f"no step in {log} after {timeout} s")


@pytest.fixture(scope="module")
def cli_run(slurm_cluster, runs, tmp_path_factory) -> tuple[dict, Path, Path]:
    work = tmp_path_factory.mktemp("work")  # sbatch's directory: the job's cwd
    checkpoints = work / HOSTILE_DIR
    done = _deploy_cli(runs, checkpoints, "--json", cwd=work)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout), work, checkpoints


def _deploy_cli(runs: Path, checkpoints: Path, *extra: str, cwd: Path):
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "commands" / "deploy_training_job.py"),
            "--target",
            "slurm",
            "--job_name",
            "e2e",
            "--runs_dir",
            str(runs),
            "--max_steps",
            str(CLI_STEPS),
            "--checkpoint_dir",
            str(checkpoints),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, "HF_TOKEN": SECRET},
    )


def test_deploy_through_the_cli_trains_two_processes_to_succeeded(cli_run, runs):
    result, work, checkpoints = cli_run
    assert result["status"] == "succeeded", result
    assert result["target"] == "slurm" and result["world_size"] == 2
    assert result["steps"] == result["max_steps"] == CLI_STEPS
    assert result["last_loss"] < result["first_loss"] - 0.5
    assert result["restarts"] == 0 and result["exit_code"] == 0
    assert result["plan"]["gpus_per_node"] is None and result["plan"]["nproc_per_node"] == 2
    # The hostile path was one argument: checkpoints are in it, and nothing ran.
    assert Path(result["checkpoint_path"]).parent == checkpoints
    assert not list(work.glob("**/PWNED*")) and not list(runs.glob("**/PWNED*"))
    # The secret reached neither the script nor the result nor the log.
    script = (runs / "e2e" / "slurm-batch.sh").read_text()
    assert script == result["plan"]["script"]
    for text in (script, json.dumps(result), Path(result["log_path"]).read_text()):
        assert SECRET not in text


def test_a_dry_run_prints_exactly_the_script_that_was_submitted(cli_run, runs):
    result, work, checkpoints = cli_run
    done = _deploy_cli(runs, checkpoints, "--dry_run", cwd=work)
    assert done.returncode == 0, done.stderr
    assert done.stdout == result["plan"]["script"] + "\n"


def test_get_logs_and_list_read_the_job_back(cli_run, runs):
    result, _, _ = cli_run
    state = get_training_job(job_name="e2e", **_slurm(runs))
    same = ("status", "steps", "first_loss", "last_loss", "restarts", "log_path", "world_size")
    assert {k: getattr(state, k) for k in same} == {k: result[k] for k in same}
    logs = get_training_job_logs(job_name="e2e", tail_lines=3, **_slurm(runs))
    assert logs.text.splitlines() == Path(result["log_path"]).read_text().splitlines()[-3:]
    assert logs.text.splitlines()[-1] == "slurm: trainer exited with 0"
    listed = list_training_jobs(**_slurm(runs)).jobs
    assert [(j.job_name, j.status) for j in listed if j.job_name == "e2e"] == [("e2e", "succeeded")]


def test_an_ended_job_keeps_its_outcome_and_the_list_reads_no_log(cli_run, runs, monkeypatch):
    from skills.training_job_deployer.targets.slurm.record import SLURM_RECORD
    from skills.training_job_deployer.targets.slurm.target import SlurmTarget

    result, _, _ = cli_run
    get_training_job(job_name="e2e", **_slurm(runs))  # a look after the end keeps it
    record = json.loads((runs / "e2e" / SLURM_RECORD).read_text())
    assert record["end"]["state"] == "COMPLETED"
    assert record["outcome"]["status"] == "succeeded"
    assert record["outcome"]["figures"]["steps"] == result["steps"]
    reads: list[str] = []
    for name in ("_read_from", "_log_size"):
        real = getattr(SlurmTarget, name)
        monkeypatch.setattr(SlurmTarget, name, lambda self, log, *a, real=real, **k: (
            reads.append(log), real(self, log, *a, **k))[1])  # fmt: skip
    (job,) = [j for j in list_training_jobs(**_slurm(runs)).jobs if j.job_name == "e2e"]
    same = ("status", "steps", "first_loss", "last_loss", "restarts", "log_path", "exit_code")
    assert {k: getattr(job, k) for k in same} == {k: result[k] for k in same}
    assert reads == []  # from the record: no log read for the ended job
    get_training_job(job_name="e2e", **_slurm(runs))
    assert reads  # the same counter sees describe's reads


def test_a_requeued_job_checkpoints_runs_again_and_resumes(slurm_cluster, runs):
    # The requeue lands a few steps after the first (step 3 at a load of 13 on 2 cores,
    # and at 4): 20 leave the first run no way to end first; every step more is trained
    # again. No evaluation: nothing here reads it. One process (gpu_per_node=1, a CPU
    # worker; one intra-op thread, as every test process has): the requeue and the resume
    # are the subject, not the world size, which the CLI and endless jobs (and the latter's
    # SIGTERM checkpoint) have at 2 (issue 36).
    steps = 20
    started = deploy_training_job(
        job_name="requeued", max_steps=steps, checkpoint_freq=0, validation_freq=0,
        gpu_per_node=1, env={"OMP_NUM_THREADS": "1"}, wait_seconds=0, **_slurm(runs),
    )  # fmt: skip
    assert started.status == "running"
    job_id = Path(started.log_path).stem.removeprefix("slurm-")
    _wait_for_step(Path(started.log_path))
    slurm_cluster.scontrol("requeue", job_id)
    deadline = time.monotonic() + 60
    while slurm_cluster.job(job_id)["JobState"] != "PENDING":  # it waits a BeginTime
        assert time.monotonic() < deadline, slurm_cluster.job(job_id)
        time.sleep(0.5)
    assert get_training_job(job_name="requeued", **_slurm(runs)).restarts == 1
    slurm_cluster.scontrol("update", f"JobId={job_id}", "StartTime=now")
    progress = CollectingProgress()
    final = get_training_job(
        job_name="requeued", wait_seconds=None, progress=progress, **_slurm(runs)
    )
    assert final.status == "succeeded", final.log_tail
    assert final.restarts == 1 and final.steps == steps
    events = parse_events(Path(final.log_path).read_text())
    (saved_on_sigterm, *_) = [e for e in events if e["event"] == "checkpoint_saved"]
    assert any(e["event"] == "preempted" for e in events)
    assert final.resumed_from == saved_on_sigterm["step"] > 0
    assert [e for e in events if e["event"] == "start"][-1]["resumed_from"] == final.resumed_from
    assert progress.events[-1].completed == steps


def _outcome(call: Callable[[], Any]) -> Any:
    """call()'s value, or the exception it raised: kept for the test that asserts on it,
    so a phase of the shared job fails its own test, not the other's."""
    try:
        return call()
    except Exception as error:  # noqa: BLE001 - the test says what it expected
        return error


@dataclass
class Endless:
    """What the endless job's phases saw, in order."""

    job_id: str
    node: str  # rank 1's Slurm node
    again: Any = None  # a second deploy while it runs (a ToolFailure)
    straggler: Any = None  # the state that named the paused rank (or the wait's failure)
    cancelled: Any = None  # cancel_training_job's state (or its failure)


@pytest.fixture(scope="module")
def endless(slurm_cluster, runs) -> Iterator[Endless]:
    """One endless 2-rank job (a step line every step) serves the straggler and the
    cancel: a Slurm job is an sbatch, a torchrun and two ranks (issue 36: was one job
    each). A second deploy is refused; rank 1 is paused until the watchdog names it the
    straggler, let go, and the job is cancelled. Each test asserts on its phase."""
    started = deploy_training_job(job_name="endless", max_steps=100_000, checkpoint_freq=0,
                                  wait_seconds=0, **JOB, **_slurm(runs))  # fmt: skip
    try:
        job_id = Path(started.log_path).stem.removeprefix("slurm-")
        rank1 = marked_process({"SLURM_JOB_ID": job_id, "RANK": "1"})
        seen = Endless(job_id=job_id, node=rank1.environ()["SLURMD_NODENAME"])
        _wait_for_step(Path(started.log_path))
        seen.again = _outcome(
            lambda: deploy_training_job(job_name="endless", wait_seconds=0, **_slurm(runs))
        )
        with pausing(rank1, stop_s=0.3, run_s=0.02):
            seen.straggler = _outcome(lambda: wait_for(
                runs, "endless", lambda s: any(f.code == "straggler" for f in s.findings),
                "straggler finding", "slurm",
            ))  # fmt: skip
        seen.cancelled = _outcome(
            lambda: cancel_training_job(job_name="endless", confirm=True, **_slurm(runs))
        )
        yield seen
    finally:
        stop_job(runs, "endless", "slurm")


def test_on_slurm_a_paused_rank_is_named_the_straggler_with_its_node(endless):
    """The watchdog of tests/integration/test_long_runs.py on a real one-node Slurm:
    sbatch, srun, torchrun, 2 ranks; rank 1 paused 300 ms at a time."""
    state = endless.straggler
    assert not isinstance(state, BaseException), state
    (found,) = [f for f in state.findings if f.code == "straggler"]
    assert (found.rank, found.host) == (1, endless.node), found


def test_cancel_stops_a_running_job_which_checkpoints(endless, slurm_cluster, runs):
    assert isinstance(endless.again, ToolFailure), endless.again
    assert endless.again.code == "job_running"
    state = endless.cancelled
    assert not isinstance(state, BaseException), state
    assert state.status == "cancelled", state
    assert state.checkpoint_step is not None and "resume" in state.message
    assert slurm_cluster.job(endless.job_id)["JobState"] == "CANCELLED"
    assert get_training_job(job_name="endless", **_slurm(runs)).status == "cancelled"


def test_a_forged_record_naming_another_slurm_job_cancels_nothing(slurm_cluster, runs):
    # Issue 20 item 8: slurm.json edited to name another job of the cluster.
    other = subprocess.run(
        ["sbatch", "--parsable", "--job-name", "someone-elses", "--wrap", "sleep 300"],
        capture_output=True, text=True, check=True, env={**os.environ, **slurm_cluster.env},
    ).stdout.strip().split(";")[0]  # fmt: skip
    try:
        (runs / "forged").mkdir()
        (runs / "forged" / "slurm.json").write_text(json.dumps(
            {"job_name": "forged", "slurm_job_id": int(other), "submitted_at": time.time()}
        ))  # fmt: skip
        with pytest.raises(ToolFailure) as refused:
            cancel_training_job(job_name="forged", confirm=True, **_slurm(runs))
        assert refused.value.code == "job_record_corrupt"
        assert refused.value.details["reason"] == "not_our_job"
        assert "someone-elses" in refused.value.message
        assert "nothing was cancelled" in refused.value.message
        assert slurm_cluster.job(other)["JobState"] in ("PENDING", "RUNNING")
        assert json.loads((runs / "forged" / "slurm.json").read_text()).get(
            "cancel_requested_at"
        ) is None  # fmt: skip
    finally:
        subprocess.run(["scancel", other], env={**os.environ, **slurm_cluster.env}, check=False)


def _failure(**kwargs) -> ToolFailure:
    with pytest.raises(ToolFailure) as failure:
        deploy_training_job(job_name="refused", max_steps=2, **kwargs)
    return failure.value


def test_the_schedulers_refusals_are_typed_errors_with_its_message(slurm_cluster, runs):
    unknown = _failure(partition="nope", **_slurm(runs))
    assert unknown.code == "not_found"
    assert "Partition nope not found" in unknown.message and "debug" in unknown.hint
    refused = _failure(partition=SHORT_PARTITION, time_limit="10", **_slurm(runs))
    assert refused.code == "slurm_rejected"
    assert "sbatch refused" in refused.message and "time limit" in refused.message.lower()
    assert refused.hint


def test_no_slurm_clients_or_no_ssh_route_are_typed_errors(slurm_cluster, runs, monkeypatch):
    # A submit needs Slurm (a dry run renders the script without it: test_slurm_script).
    unreachable = _failure(ssh_host="no-such-host.invalid", **_slurm(runs))
    assert unreachable.code == "endpoint_unreachable"
    assert "no-such-host.invalid" in unreachable.message and "ssh" in unreachable.hint
    monkeypatch.setenv("PATH", str(runs / "no-bin"))
    missing = _failure(**_slurm(runs))
    assert missing.code == "slurm_unavailable" and "not on PATH" in missing.message
    assert "ssh_host" in missing.hint


def test_over_mcp_the_job_runs_in_the_sessions_root_not_the_servers_directory(
    slurm_cluster, tmp_path
):
    """sbatch's directory is the job's (cli_run's `work`): over MCP, the calling session's
    workspace, though the server never changes its own directory (issue 45, finding 4)."""
    project = tmp_path / "project"
    project.mkdir()

    async def roots(_context: Any) -> ListRootsResult:
        return ListRootsResult(roots=[Root.model_validate({"uri": project.as_uri()})])

    async def deploy() -> Any:
        server = build_server(workspace=Workspace(root=tmp_path, chosen=False))
        callback: Any = roots  # the SDK's ListRootsFnT
        async with Client(server, mode="legacy", list_roots_callback=callback) as client:
            return await client.call_tool("deploy_training_job", {
                "job_name": "in-session", "target": "slurm", "max_steps": 1,
                "gpu_per_node": 1, "validation_freq": 0, "wait_seconds": 0,
            })  # fmt: skip

    before = os.getcwd()
    started = anyio.run(deploy)
    assert not started.is_error, started.content
    job_id = Path(started.structured_content["log_path"]).stem.removeprefix("slurm-")
    try:
        assert slurm_cluster.job(job_id)["WorkDir"] == str(project)
        assert Path(started.structured_content["log_path"]).is_relative_to(project / "runs")
    finally:
        subprocess.run(["scancel", job_id], check=False)  # SLURM_CONF: the fixture's
    assert os.getcwd() == before
