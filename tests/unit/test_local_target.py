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

import psutil
import pytest

from skills.shared.errors import ToolFailure
from skills.shared.progress import CollectingProgress
from skills.training_job_deployer.job_spec import JobSpec
from skills.training_job_deployer.targets.local.target import (
    LocalPlan,
    LocalTarget,
    check_gpu_fit,
    visible_gpus,
)


def scripted_plan(target: LocalTarget, job: str, script: str) -> LocalPlan:
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
    assert state.next_step.tool == "get_training_job"
    assert state.next_step.arguments["job_name"] == "slow"
    with pytest.raises(ToolFailure) as again:
        target.submit("slow", scripted_plan(target, "slow", script))
    assert again.value.code == "job_running"

    deadline = time.monotonic() + 30  # a loaded machine (parallel tests) starts it late
    while '"child"' not in (log := target.logs("slow")):
        assert time.monotonic() < deadline, log
        time.sleep(0.1)
    # read once the trainer printed: by then its supervisor has recorded it
    record = json.loads((tmp_path / "slow" / "job.json").read_text())["trainer"]
    child_pid = next(json.loads(line)["pid"] for line in log.splitlines() if '"child"' in line)
    state = target.cancel("slow", grace_s=5)
    assert state.status == "cancelled"
    for pid in (record["pid"], child_pid):  # the whole group got the signal
        deadline = time.monotonic() + 5
        while psutil.pid_exists(pid) and time.monotonic() < deadline:
            time.sleep(0.1)  # the orphaned child is reaped by init, not by us
        assert not psutil.pid_exists(pid)


def test_with_its_supervisor_killed_cancel_still_stops_the_trainer(tmp_path):
    # Cancel signals the trainer itself only after checking that the recorded pid is this
    # job's torchrun (its environment names the run directory), not just pid + start time.
    target = LocalTarget(tmp_path)
    script = EMIT + 'emit(event="start", world_size=1, max_steps=100)\ntime.sleep(60)\n'
    target.submit("orphan", scripted_plan(target, "orphan", script))
    # Wait for the trainer's first line in the log, not only its pid in the record: the
    # ranks write through the supervisor's pipe, and a rank still to write its first
    # line when the supervisor dies gets a broken pipe and ends (seen under load).
    log = tmp_path / "orphan" / "logs" / "attempt-1.log"
    deadline = time.monotonic() + 30
    while '"start"' not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    record = json.loads((tmp_path / "orphan" / "job.json").read_text())
    supervisor = psutil.Process(record["supervisor"]["pid"])
    supervisor.kill()
    supervisor.wait(5)
    trainer = psutil.Process(record["trainer"]["pid"])
    assert target.describe("orphan").status == "running"  # the trainer is ours and alive
    target.cancel("orphan", grace_s=2)
    trainer.wait(10)  # raises TimeoutExpired if it was not signalled
    assert target.describe("orphan").status != "running"


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


def test_plan_is_an_argv_list_with_the_trainer_flags(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)  # 4 CPU processes fit this "host"
    spec = JobSpec(job_name="p", gpu_per_node=4, max_steps=7, learning_rate=0.01)
    plan = LocalTarget(tmp_path).plan(spec)
    assert plan.argv[plan.argv.index("-m", 3) + 1] == "trainer"
    assert "--nproc_per_node=4" in plan.argv
    assert plan.argv[plan.argv.index("--max_steps") + 1] == "7"
    assert "--train_batch_size" not in plan.argv  # None: the trainer's default applies
    assert plan.env["PYTHONUNBUFFERED"] == "1"
    assert plan.run_dir == str(tmp_path / "p")


@pytest.mark.parametrize(
    ("caller", "procs", "threads"),
    [
        (None, 4, "2"),  # none set: this host's 8 cores split between the ranks
        (None, 1, "8"),
        ("1", 1, "1"),  # the caller's choice wins (the trainer and torchrun honour it too)
        (" 3 ", 4, "3"),
        ("0", 4, "2"),  # not a thread count: the split
        ("two", 1, "8"),
        ("", 2, "4"),
    ],
)
def test_ranks_get_the_callers_omp_num_threads_else_a_share_of_the_cores(
    tmp_path, monkeypatch, caller, procs, threads
):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    if caller is None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    else:
        monkeypatch.setenv("OMP_NUM_THREADS", caller)
    plan = LocalTarget(tmp_path).plan(JobSpec(job_name="omp", gpu_per_node=procs))
    assert plan.env["OMP_NUM_THREADS"] == threads
    # The job's own variables still come last.
    spec = JobSpec(job_name="omp", gpu_per_node=procs, env={"OMP_NUM_THREADS": "5"})
    assert LocalTarget(tmp_path).plan(spec).env["OMP_NUM_THREADS"] == "5"


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
    [(2, 0, True), (8, 0, True), (2, 2, True), (1, 2, True), (4, 2, False), (9, 0, False)],
)
def test_one_process_per_gpu_or_per_cpu_without_gpus(procs, gpus, fits):
    cpus = 8
    if fits:
        check_gpu_fit(procs, gpus, cpus)
    else:
        with pytest.raises(ToolFailure) as caught:
            check_gpu_fit(procs, gpus, cpus)
        assert caught.value.code == "not_enough_gpus" and "gpu_per_node=2" in caught.value.hint


def test_a_huge_process_count_is_refused_before_planning(tmp_path):
    # Reproduction 9: --gpu_per_node 100000 on a CPU host planned 100000 processes.
    with pytest.raises(ToolFailure) as caught:
        LocalTarget(tmp_path).plan(JobSpec(job_name="p", gpu_per_node=64))
    assert caught.value.code == "not_enough_gpus" or os.cpu_count() >= 64


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


def test_plan_passes_max_restarts_to_torchrun_and_checkpoints_to_the_run_dir(tmp_path):
    plan = LocalTarget(tmp_path).plan(JobSpec(job_name="ck", max_restarts=3))
    trainer_at = plan.argv.index("trainer")
    assert "--max-restarts=3" in plan.argv[:trainer_at]  # torchrun's flag, before `-m trainer`
    args = plan.argv[trainer_at + 1 :]
    assert args[args.index("--checkpoint_dir") + 1] == str(tmp_path / "ck" / "checkpoints")
    assert args[args.index("--output_dir") + 1] == str(tmp_path / "ck")
    assert args.count("--checkpoint_dir") == args.count("--output_dir") == 1
    assert "--max-restarts=0" in LocalTarget(tmp_path).plan(JobSpec(job_name="ck")).argv


@pytest.mark.parametrize(
    ("given", "passed"),
    [
        ("s3://bucket/ckpt/ck", "s3://bucket/ckpt/ck"),
        ("/mnt/fsx/ck", "/mnt/fsx/ck"),
        ("shared/ck", "{cwd}/shared/ck"),  # the job runs in its run dir: made absolute
    ],
)
def test_an_explicit_checkpoint_dir_overrides_the_default(tmp_path, monkeypatch, given, passed):
    monkeypatch.chdir(tmp_path)
    plan = LocalTarget(tmp_path / "runs").plan(JobSpec(job_name="ck", checkpoint_dir=given))
    assert plan.argv[plan.argv.index("--checkpoint_dir") + 1] == passed.format(cwd=tmp_path)
    assert plan.argv.count("--checkpoint_dir") == 1


def test_local_paths_are_made_absolute_and_hub_names_left_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus.txt").write_text("text")
    spec = JobSpec(
        job_name="paths",
        dataset="corpus.txt",
        tokenizer="meta-llama/Llama-3.2-1B",
        model_name_or_path="./models/llama",
    )
    argv = LocalTarget(tmp_path / "runs").plan(spec).argv
    flag = {
        name: argv[argv.index(f"--{name}") + 1] for name in spec.model_fields_set - {"job_name"}
    }
    assert flag == {
        "dataset": str(tmp_path / "corpus.txt"),
        "tokenizer": "meta-llama/Llama-3.2-1B",
        "model_name_or_path": str(tmp_path / "models" / "llama"),
    }


def test_plan_passes_the_new_trainer_flags(tmp_path):
    spec = JobSpec(
        job_name="flags", cpu_offload=False, async_save=True, validation_freq=0, keep_last=1
    )
    argv = LocalTarget(tmp_path).plan(spec).argv
    args = argv[argv.index("trainer") + 1 :]
    pairs = dict(zip(args[::2], args[1::2], strict=True))  # flag, value, flag, value, ...
    assert {k: pairs[k] for k in ("--cpu_offload", "--async_save", "--validation_freq")} == {
        "--cpu_offload": "false",
        "--async_save": "true",
        "--validation_freq": "0",
    }
    assert pairs["--keep_last"] == "1" and "--activation_checkpointing" not in pairs


PREEMPTED_RUN = (
    EMIT
    + """
emit(event="start", world_size=2, max_steps=10, resumed_from=None)
emit(event="step", step=1, loss=5.0, tokens_per_s=10.0, elapsed_s=0.1)
emit(event="eval", step=2, loss=4.5, perplexity=90.0)
emit(event="checkpoint_saved", step=3, path="/ck/step-3", blocked_s=0.1, **{"async": False})
emit(event="preempted", step=3, signal=15, checkpoint="/ck/step-3")
emit(event="summary", steps=3, first_loss=5.0, last_loss=4.8, tokens_per_s=10.0, elapsed_s=0.3,
     world_size=2, resumed_from=None, last_eval_loss=4.5, checkpoint="/ck/step-3")
sys.exit(143)
"""
)


def test_a_preempted_run_says_where_a_rerun_resumes(tmp_path):
    target = LocalTarget(tmp_path)
    target.submit("pre", scripted_plan(target, "pre", PREEMPTED_RUN))
    state = target.follow("pre")
    assert (state.status, state.exit_code) == ("preempted", 143)
    assert state.message == "preempted: checkpoint saved at step 3; re-run the same job to resume"
    assert (state.checkpoint_step, state.checkpoint_path, state.last_eval_loss) == (
        3,
        "/ck/step-3",
        4.5,
    )
    assert "resumes from step 3" in state.hint and state.log_tail is None
    assert state.cli_exit_status() == 1
    assert ("outcome", state.message) in state.summary_rows()
    # Another process reads the same state back from the run directory.
    assert LocalTarget(tmp_path).describe("pre").status == "preempted"


def test_exit_code_143_alone_means_preempted(tmp_path):
    target = LocalTarget(tmp_path)
    script = EMIT + 'emit(event="start", world_size=1, max_steps=5)\nsys.exit(143)'
    target.submit("term", scripted_plan(target, "term", script))
    state = target.follow("term")
    assert state.status == "preempted"
    assert state.message == "preempted without a checkpoint; a re-run starts over"


def test_a_resumed_run_reports_where_it_resumed_and_its_eval_loss(tmp_path):
    target = LocalTarget(tmp_path)
    script = (
        EMIT
        + """
emit(event="checkpoint_skipped", path="/ck/step-8", reason="no COMPLETE marker")
emit(event="checkpoint_loaded", step=6, path="/ck/step-6", seconds=0.2)
emit(event="start", world_size=2, max_steps=8, resumed_from=6)
emit(event="step", step=7, loss=3.0, tokens_per_s=50.0)
emit(event="step", step=8, loss=2.5, tokens_per_s=60.0)
emit(event="eval", step=8, loss=2.75, perplexity=15.6)
emit(event="checkpoint_saved", step=8, path="/ck/step-8", blocked_s=0.0, **{"async": False})
emit(event="summary", steps=8, first_loss=3.0, last_loss=2.5, tokens_per_s=55.0, elapsed_s=0.2,
     world_size=2, resumed_from=6, last_eval_loss=2.75, checkpoint="/ck/step-8")
"""
    )
    target.submit("resumed", scripted_plan(target, "resumed", script))
    progress = CollectingProgress()
    state = target.follow("resumed", progress)
    assert state.status == "succeeded" and state.message is None
    assert (state.resumed_from, state.steps, state.last_eval_loss) == (6, 8, 2.75)
    assert (state.checkpoint_step, state.checkpoint_path) == (8, "/ck/step-8")
    assert [e.completed for e in progress.events] == [6, 7, 8]


def test_a_failed_run_has_a_message(tmp_path):
    target = LocalTarget(tmp_path)
    target.submit("crash2", scripted_plan(target, "crash2", "sys.exit(3)"))
    state = target.follow("crash2")
    assert state.status == "failed"
    assert state.message == (
        "failed: the trainer stopped with exit code 3 before its summary line; see the log tail"
    )


def test_cancel_after_a_checkpoint_says_a_rerun_resumes(tmp_path):
    target = LocalTarget(tmp_path)
    script = (
        EMIT
        + """
import signal
def on_term(*_):
    emit(event="checkpoint_saved", step=2, path="/ck/step-2", blocked_s=0.0, **{"async": False})
    emit(event="preempted", step=2, signal=15, checkpoint="/ck/step-2")
    sys.exit(143)
signal.signal(signal.SIGTERM, on_term)
emit(event="start", world_size=1, max_steps=100)
emit(event="step", step=2, loss=4.0, tokens_per_s=1.0)
time.sleep(60)
"""
    )
    target.submit("stop", scripted_plan(target, "stop", script))
    assert target.follow("stop", wait_seconds=1.0).status == "running"
    deadline = time.monotonic() + 30  # the SIGTERM handler is in place once the step is logged
    while '"step"' not in (log := target.logs("stop")):
        assert time.monotonic() < deadline, log
        time.sleep(0.1)
    state = target.cancel("stop", grace_s=10)
    assert state.status == "cancelled" and state.checkpoint_step == 2
    assert state.message == "cancelled: checkpoint saved at step 2; re-run the same job to resume"


def test_get_training_job_logs_never_follows_a_linked_attempt_log(tmp_path):
    """Issue 20 item 17, through the tool: an attempt log replaced by a link to a file
    outside the job (here a stand-in for /etc/passwd) is refused, never printed."""
    from commands.get_training_job_logs import get_training_job_logs

    target = LocalTarget(tmp_path)
    target.submit("linked", scripted_plan(target, "linked", GOOD_RUN))
    target.follow("linked")
    secret = tmp_path / "outside.txt"
    secret.write_text("root:x:0:0:CANARY-outside-the-job\n")
    log = tmp_path / "linked" / "logs" / "attempt-1.log"
    log.unlink()
    log.symlink_to(secret)
    with pytest.raises(ToolFailure) as caught:
        get_training_job_logs(job_name="linked", runs_dir=str(tmp_path))
    assert "CANARY" not in str(caught.value.to_dict())
    assert caught.value.code == "path_not_allowed"
