"""Checkpoints under failure: kill -9 under torchrun --max-restarts, incomplete saves,
resume on another world size, SIGTERM, async saves, and the NaN guard.

Every comparison is against one unbroken 2-process run with the same seed: a resumed
run must produce the loss the unbroken run had at the same step (same weights,
optimizer state, LR schedule and data position), not merely a plausible one.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.trainer.conftest import ROOT, launch, train_here, trainer_env
from trainer.checkpoint_layout import MARKER, is_complete, read_marker, step_dirs, step_of

# Small and fast: each step is tens of milliseconds on a 2-core CPU machine.
BASE = ["--seq_len", "64", "--train_batch_size", "4", "--log_freq", "1"]
BASE += ["--validation_freq", "0", "--warmup_steps", "5"]
STEPS = 30  # checkpoints at 10, 20, 30: a kill after 10 still leaves steps to resume
TOL = 2e-4  # same math, maybe another summation order after resharding


def torchrun(nproc: int, args: list[str], max_restarts: int = 0) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        f"--max-restarts={max_restarts}",
        "-m",
        "trainer",
        *args,
    ]


def events_of(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def losses(events: list[dict]) -> dict[int, float]:
    return {e["step"]: e["loss"] for e in events if e["event"] == "step"}


def of(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["event"] == kind]


def children(pid: int) -> list[int]:
    """Direct child pids, from /proc (torchrun's workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # "pid (comm) state ppid ..."; comm may contain spaces, so split after ')'.
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return sorted(found)


def run_until(argv: list[str], ready, act, timeout: float = 120) -> tuple[int, list[dict], str]:
    """Start argv, call act(proc) once an emitted event satisfies ready(event), then
    collect the rest of the output."""
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=trainer_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    # A hung run must fail the test, not the CI job: kill it at the deadline.
    watchdog = threading.Timer(timeout, lambda: os.killpg(proc.pid, signal.SIGKILL))
    watchdog.start()
    lines, acted = [], False
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if not acted and line.startswith("{") and ready(json.loads(line)):
                act(proc)
                acted = True
        proc.wait()
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != -signal.SIGKILL, "run hung:\n" + "".join(lines)[-3000:]
    assert acted, "the run ended before the action could happen:\n" + "".join(lines)[-3000:]
    stderr = proc.stderr.read() if proc.stderr else ""
    return proc.returncode, events_of("".join(lines)), stderr


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory):
    """The reference: 2 ranks, STEPS steps, a sync checkpoint every 10, all kept."""
    ckpt = tmp_path_factory.mktemp("unbroken")
    # Its ranks forked as torchrun would start them (launch): torchrun itself is the
    # subject of the kill -9 and SIGTERM tests below, not of this reference.
    proc = launch(
        [*BASE, "--max_steps", str(STEPS), "--checkpoint_dir", str(ckpt)]
        + ["--checkpoint_freq", "10", "--keep_last", "0"],
        2,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return events_of(proc.stdout), ckpt


def test_unbroken_run_writes_complete_checkpoints(unbroken):
    events, ckpt = unbroken
    saved = of(events, "checkpoint_saved")
    assert [e["step"] for e in saved] == [10, 20, 30]
    dirs = step_dirs(ckpt)
    assert [step_of(d) for d in dirs] == [10, 20, 30]
    assert all(is_complete(d) for d in dirs)
    assert read_marker(dirs[0]) | {"saved_at": 0} == {"step": 10, "world_size": 2, "saved_at": 0}
    config = json.loads((dirs[-1] / "train_config.json").read_text())
    assert config["max_steps"] == STEPS and config["model"]["dim"] == 128
    (summary,) = of(events, "summary")
    assert summary["checkpoint"] == str(dirs[-1]) and summary["resumed_from"] is None
    assert summary["last_loss"] < summary["first_loss"] - 1.0  # the loss falls


def test_kill_9_of_one_rank_restarts_and_resumes_the_same_run(unbroken, tmp_path):
    reference = losses(unbroken[0])
    argv = torchrun(
        2,
        [*BASE, "--max_steps", str(STEPS), "--checkpoint_dir", str(tmp_path)]
        + ["--checkpoint_freq", "10", "--async_save", "true"],
        max_restarts=1,
    )

    def kill_a_rank(proc: subprocess.Popen) -> None:
        workers = children(proc.pid)
        assert len(workers) == 2, workers
        os.kill(workers[-1], signal.SIGKILL)

    # Once checkpoint 10 is complete, kill rank 1 with no chance to clean up.
    code, events, stderr = run_until(
        argv, lambda e: e["event"] == "checkpoint_saved" and e["step"] >= 10, kill_a_rank
    )
    assert code == 0, stderr[-3000:]
    starts = of(events, "start")
    assert len(starts) == 2, "torchrun restarted the workers once"
    (loaded,) = of(events, "checkpoint_loaded")
    resumed = loaded["step"]
    assert resumed >= 10 and starts[1]["resumed_from"] == resumed
    # The second attempt runs exactly the steps after the checkpoint: none twice in
    # it, none missing, up to the end.
    second = events[events.index(starts[1]) :]
    assert [e["step"] for e in of(second, "step")] == list(range(resumed + 1, STEPS + 1))
    # Same data position, weights, optimizer and LR: the same loss as the unbroken run.
    again = losses(second)
    assert again[resumed + 1] == pytest.approx(reference[resumed + 1], abs=TOL)
    assert again[STEPS] == pytest.approx(reference[STEPS], abs=5 * TOL)
    assert of(events, "summary")[-1]["steps"] == STEPS


def test_a_checkpoint_without_its_marker_is_skipped(unbroken, tmp_path, capsys, no_dist_env):
    reference = losses(unbroken[0])
    for step in (20, 30):
        shutil.copytree(unbroken[1] / f"step-{step}", tmp_path / f"step-{step}")
    (tmp_path / "step-30" / MARKER).unlink()  # as if the save was cut off
    # In this process, with the same global batch (1 x 8): every rank makes this choice
    # on its own from the same files (2 ranks skip a damaged step alike in
    # test_checkpoint_verify), so one rank shows it without starting three processes.
    args = [*BASE, "--max_steps", "22", "--checkpoint_dir", str(tmp_path)]
    args[args.index("--train_batch_size") + 1] = "8"
    code, events = train_here(capsys, args)
    assert code == 0, events[-1]
    (skipped,) = of(events, "checkpoint_skipped")
    assert skipped["path"] == str(tmp_path / "step-30")
    (loaded,) = of(events, "checkpoint_loaded")
    assert loaded["step"] == 20
    assert losses(events)[21] == pytest.approx(reference[21], abs=TOL)


def test_a_two_process_checkpoint_resumes_on_one_process(unbroken, tmp_path, capsys, no_dist_env):
    # Same global batch (1 x 8 instead of 2 x 4): DCP reshards the weights and the
    # optimizer state, and the data position is counted in global windows. The one
    # process is this one (a world of one, as under torchrun with one process).
    reference = losses(unbroken[0])
    shutil.copytree(unbroken[1] / "step-20", tmp_path / "step-20")
    args = [*BASE, "--max_steps", "21", "--checkpoint_dir", str(tmp_path)]
    args[args.index("--train_batch_size") + 1] = "8"
    code, events = train_here(capsys, args)
    assert code == 0, events[-1]
    assert of(events, "start")[0]["world_size"] == 1
    assert of(events, "checkpoint_loaded")[0]["step"] == 20
    assert losses(events)[21] == pytest.approx(reference[21], abs=TOL)


def test_sigterm_saves_a_checkpoint_and_exits_with_the_preempted_code(tmp_path):
    # A plain process (no torchrun) so the exit code is the trainer's own.
    argv = [sys.executable, "-m", "trainer", *BASE, "--max_steps", "100000"]
    argv += ["--checkpoint_dir", str(tmp_path), "--checkpoint_freq", "0"]
    code, events, stderr = run_until(
        argv,
        lambda e: e["event"] == "step" and e["step"] >= 3,
        lambda proc: proc.send_signal(signal.SIGTERM),
    )
    assert code == 143, stderr[-3000:]
    (preempted,) = of(events, "preempted")
    assert preempted["signal"] == signal.SIGTERM
    step = preempted["step"]
    assert preempted["checkpoint"] == str(tmp_path / f"step-{step}")
    assert is_complete(tmp_path / f"step-{step}")
    assert of(events, "summary")[0]["steps"] == step


def test_sigterm_to_torchrun_checkpoints_every_rank(tmp_path):
    # Kubernetes stops a pod by sending SIGTERM to its main process, torchrun, which
    # forwards it to the workers.
    argv = torchrun(2, [*BASE, "--max_steps", "100000", "--checkpoint_dir", str(tmp_path)])
    code, events, stderr = run_until(
        argv,
        lambda e: e["event"] == "step" and e["step"] >= 3,
        lambda proc: proc.send_signal(signal.SIGTERM),
    )
    assert code != 0  # torchrun reports that it was signalled
    (preempted,) = of(events, "preempted")
    path = tmp_path / f"step-{preempted['step']}"
    assert is_complete(path) and read_marker(path)["world_size"] == 2
    assert len(list(path.glob("__*_0.distcp"))) == 2  # both ranks wrote their shard


def test_nan_loss_writes_no_checkpoint_of_the_poisoned_state(tmp_path, capsys, no_dist_env):
    # A learning rate this large diverges within a few steps. In this process: the exit
    # code is main's return value.
    argv = [*BASE, "--max_steps", "200"]
    argv += ["--checkpoint_dir", str(tmp_path), "--checkpoint_freq", "1"]
    argv += ["--learning_rate", "1e6", "--warmup_steps", "0", "--max_grad_norm", "0"]
    code, events = train_here(capsys, argv)
    assert code == 1, events[-1]
    (error,) = of(events, "error")
    assert error["error_type"] == "NonFiniteLossError"
    bad_step = int(error["message"].split(" at step ")[1].split(";")[0])
    saved = [step_of(d) for d in step_dirs(tmp_path)]
    assert saved and max(saved) < bad_step
