"""The local target's lifecycle (submit, follow, describe, logs, cancel) with real
processes. The processes here print trainer-format JSON lines from a short script
rather than train, so each outcome (success, error line, crash, hang) is made on
purpose; real torchrun runs are in tests/integration/test_local_training.py."""

from __future__ import annotations

import json
import os
import sys
import textwrap
import time
from pathlib import Path

import pytest

from skills.shared.errors import ToolFailure
from skills.shared.progress import CollectingProgress
from skills.training_job_deployer.job_spec import JobSpec
from skills.training_job_deployer.local_target import (
    LocalTarget,
    _pid_running,
    check_gpu_fit,
    visible_gpus,
)
from skills.training_job_deployer.models import LaunchPlan


def scripted_plan(target: LocalTarget, job: str, script: str) -> LaunchPlan:
    plan = target.plan(JobSpec(job_name=job))
    code = "import json, sys, time\n" + textwrap.dedent(script)
    return plan.model_copy(update={"argv": [sys.executable, "-c", code]})


EMIT = "def emit(**e):\n    print(json.dumps(e), flush=True)\n"

GOOD_RUN = (
    EMIT
    + """
emit(event="start", world_size=2, max_steps=3)
for step, loss in enumerate([5.0, 4.0, 3.5], start=1):
    emit(event="step", step=step, loss=loss, tokens_per_s=100.0 * step, elapsed_s=0.1 * step)
    time.sleep(0.1)
print("a warning on stderr", file=sys.stderr)
emit(event="summary", steps=3, first_loss=5.0, last_loss=3.5, tokens_per_s=200.0, elapsed_s=0.4)
"""
)


def test_follow_streams_steps_as_progress_and_ends_succeeded(tmp_path):
    target = LocalTarget(tmp_path)
    target.submit("good", scripted_plan(target, "good", GOOD_RUN))
    progress = CollectingProgress()
    state = target.follow("good", progress)
    assert state.status == "succeeded" and state.exit_code == 0
    assert (state.steps, state.max_steps, state.world_size) == (3, 3, 2)
    assert (state.first_loss, state.last_loss, state.tokens_per_s) == (5.0, 3.5, 200.0)
    assert [e.completed for e in progress.events] == [0, 1, 2, 3]
    assert progress.events[-1].total == 3 and "loss 3.5000" in progress.events[-1].message
    assert state.log_tail is None


def test_error_line_makes_a_failed_state_with_log_tail(tmp_path):
    target = LocalTarget(tmp_path)
    script = (
        EMIT
        + """
emit(event="start", world_size=1, max_steps=10)
emit(event="step", step=1, loss=9.0, tokens_per_s=1.0)
emit(event="error", error_type="NonFiniteLoss", message="loss is nan at step 2")
sys.exit(1)
"""
    )
    target.submit("bad", scripted_plan(target, "bad", script))
    state = target.follow("bad")
    assert state.status == "failed" and state.exit_code == 1
    assert state.error == {
        "event": "error",
        "error_type": "NonFiniteLoss",
        "message": "loss is nan at step 2",
    }
    assert "loss is nan" in state.log_tail


def test_crash_without_any_line_is_failed_with_its_exit_code(tmp_path):
    target = LocalTarget(tmp_path)
    target.submit("crash", scripted_plan(target, "crash", "sys.exit(3)"))
    state = target.follow("crash")
    assert (state.status, state.exit_code, state.steps) == ("failed", 3, 0)


def test_wait_seconds_returns_running_then_cancel_stops_the_process_group(tmp_path):
    target = LocalTarget(tmp_path)
    script = (
        EMIT
        + """
import subprocess
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(json.dumps({"event": "child", "pid": child.pid}), flush=True)
emit(event="start", world_size=1, max_steps=100)
time.sleep(60)
"""
    )
    target.submit("slow", scripted_plan(target, "slow", script))
    # The script sleeps 60 s: "running" means follow returned at its deadline.
    state = target.follow("slow", wait_seconds=1.0)
    assert state.status == "running"
    assert "get_training_job" in state.next_step
    with pytest.raises(ToolFailure) as again:
        target.submit("slow", scripted_plan(target, "slow", script))
    assert again.value.code == "job_running"

    record = json.loads((tmp_path / "slow" / "job.json").read_text())
    child_pid = next(
        json.loads(line)["pid"] for line in target.logs("slow").splitlines() if '"child"' in line
    )
    state = target.cancel("slow", grace_s=5)
    assert state.status == "cancelled"
    for pid in (record["pid"], child_pid):  # the whole group got the signal
        deadline = time.monotonic() + 5
        while _pid_running(pid) and time.monotonic() < deadline:
            time.sleep(0.1)  # the orphaned child is reaped by init, not by us
        assert not _pid_running(pid)


def test_another_process_sees_the_state_from_the_run_directory(tmp_path):
    first = LocalTarget(tmp_path)
    first.submit("seen", scripted_plan(first, "seen", GOOD_RUN))
    first.follow("seen")
    # A fresh target object holds no process handle: state comes from job.json and the log.
    state = LocalTarget(tmp_path).describe("seen")
    assert state.status == "succeeded" and state.last_loss == 3.5


def test_rerun_keeps_earlier_logs(tmp_path):
    target = LocalTarget(tmp_path)
    for _ in range(2):
        plan = scripted_plan(target, "twice", GOOD_RUN)
        target.submit("twice", plan)
        target.follow("twice")
    logs = sorted(p.name for p in (tmp_path / "twice" / "logs").iterdir())
    assert logs == ["attempt-1.log", "attempt-2.log"]


def test_unknown_job_is_a_coded_failure(tmp_path):
    with pytest.raises(ToolFailure) as caught:
        LocalTarget(tmp_path).describe("nobody")
    assert caught.value.code == "job_not_found" and caught.value.hint


def test_several_nodes_are_refused_locally(tmp_path):
    with pytest.raises(ToolFailure) as caught:
        LocalTarget(tmp_path).plan(JobSpec(job_name="big", num_nodes=2))
    assert caught.value.code == "unsupported_for_target"


def test_secrets_in_the_log_are_masked(tmp_path, monkeypatch):
    token = "hf_SeCrEtToKeN1234567890"
    monkeypatch.setenv("HF_TOKEN", token)
    target = LocalTarget(tmp_path)
    script = (
        "import os\nprint('token is', os.environ['HF_TOKEN'])\n"
        "print(json.dumps({'event': 'error', 'error_type': 'Auth', "
        "'message': 'bad token ' + os.environ['HF_TOKEN']}))\nsys.exit(1)"
    )
    target.submit("leak", scripted_plan(target, "leak", script))
    state = target.follow("leak")
    assert state.status == "failed"
    assert token not in state.log_tail and "***" in state.log_tail
    assert state.error["message"] == "bad token ***"
    assert token not in state.model_dump_json()


def test_plan_is_an_argv_list_with_the_trainer_flags(tmp_path):
    spec = JobSpec(job_name="p", gpu_per_node=4, max_steps=7, learning_rate=0.01)
    plan = LocalTarget(tmp_path).plan(spec)
    assert plan.argv[plan.argv.index("-m", 3) + 1] == "trainer"
    assert "--nproc_per_node=4" in plan.argv
    assert plan.argv[plan.argv.index("--max_steps") + 1] == "7"
    assert "--train_batch_size" not in plan.argv  # None: the trainer's default applies
    assert plan.env["PYTHONUNBUFFERED"] == "1"
    assert plan.run_dir == str(tmp_path / "p")


LISTING = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-b)\n"


@pytest.mark.parametrize(
    ("listing", "visible", "gpus"),
    [
        (None, None, 0),  # no NVIDIA driver: CPU processes
        (None, "0,1", 0),  # a stray CUDA_VISIBLE_DEVICES does not invent GPUs
        (LISTING, None, 2),
        (LISTING, "1", 1),
        (LISTING, "", 0),
        (LISTING, "-1", 0),
        (LISTING, "0,1,2,3", 2),
    ],
)
def test_visible_gpus(listing, visible, gpus):
    assert visible_gpus(listing, visible) == gpus


@pytest.mark.parametrize(
    ("procs", "gpus", "fits"),
    [(2, 0, True), (8, 0, True), (2, 2, True), (1, 2, True), (4, 2, False)],
)
def test_one_process_per_gpu(procs, gpus, fits):
    if fits:
        check_gpu_fit(procs, gpus)
    else:
        with pytest.raises(ToolFailure) as caught:
            check_gpu_fit(procs, gpus)
        assert caught.value.code == "not_enough_gpus" and "gpu_per_node=2" in caught.value.hint


def test_missing_torch_is_a_coded_failure_before_anything_starts(tmp_path, monkeypatch):
    # Simulates an environment without the trainer extra (uninstalling torch here is
    # not an option); only the stdlib lookup is replaced, not product code.
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a)
    )
    target = LocalTarget(tmp_path)
    with pytest.raises(ToolFailure) as caught:
        target.submit("no-torch", target.plan(JobSpec(job_name="no-torch")))
    assert caught.value.code == "trainer_not_installed" and "trainer" in caught.value.hint
    assert not (tmp_path / "no-torch" / "job.json").exists()


def test_plan_puts_this_project_on_the_jobs_path(tmp_path):
    plan = LocalTarget(tmp_path).plan(JobSpec(job_name="p"))
    root = str(Path(__file__).resolve().parents[2])
    assert plan.env["PYTHONPATH"].split(os.pathsep)[0] == root
