"""Weights & Biases (issue 48 item 3): with W&B enabled by the user's environment, rank
0's run is written by the real `wandb` SDK (WANDB_MODE=offline: wandb-core writes the
run file `wandb sync` would upload; read back by tests/services/wandb_offline.py with
wandb's own record schema) with the step lines' values at their steps, the config and
the job's name; a W&B server that refuses never stops or stalls training (one warning)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.services.wandb_offline import read_run
from tests.trainer.conftest import parse_lines, train_here
from trainer import wandb_tracking

RUN_ARGS = ["--max_steps", "6", "--log_freq", "2", "--validation_freq", "3"]


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        pytest.param({}, False, id="nothing set: no W&B"),
        pytest.param({"WANDB_API_KEY": "k"}, True, id="a key enables it"),
        pytest.param({"WANDB_MODE": "offline"}, True, id="offline runs need no key"),
        pytest.param(
            {"WANDB_API_KEY": "k", "WANDB_MODE": "disabled"}, False, id="disabled wins over a key"
        ),  # fmt: skip
        pytest.param({"WANDB_PROJECT": "p"}, False, id="a project alone enables nothing"),
    ],
)
def test_wandb_is_on_only_when_the_user_enables_it(environ, expected):
    assert wandb_tracking.enabled(environ) is expected


@pytest.fixture
def wandb_home(monkeypatch, tmp_path):
    """W&B's own files (settings, cache, artifacts) in this test's directory."""
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home" / name.lower()))
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DIR", "WANDB_BASE_URL", "WANDB_ENTITY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    yield
    # wandb keeps one process-wide setup (its settings, its wandb-core service); a job
    # is one process, these tests share one: the next test's run starts from nothing.
    import wandb

    wandb.teardown()


def test_an_offline_run_holds_the_step_lines_values_config_and_job_name(
    wandb_home, no_dist_env, capsys, monkeypatch, tmp_path
):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_PROJECT", "issue-48")
    monkeypatch.setenv("FSDP_EKS_JOB_NAME", "tracked-job")
    ckpt = tmp_path / "checkpoints"
    code, events = train_here(capsys, [*RUN_ARGS, "--checkpoint_dir", str(ckpt)])
    assert code == 0
    steps = {e["step"]: e for e in events if e["event"] == "step"}
    assert sorted(steps) == [1, 2, 4, 6]

    (run_dir,) = (ckpt / "wandb").glob("offline-run-*")  # beside the TensorBoard events
    run = read_run(run_dir)
    assert (run["run"].project, run["run"].display_name) == ("issue-48", "tracked-job")
    assert run["history"]["loss"] == pytest.approx({s: e["loss"] for s, e in steps.items()})
    assert run["history"]["lr"] == pytest.approx({s: e["lr"] for s, e in steps.items()})
    evals = {e["step"]: e["loss"] for e in events if e["event"] == "eval"}
    assert run["history"]["eval_loss"] == pytest.approx(evals)
    assert run["config"]["max_steps"] == "6" and run["config"]["job_name"] == "tracked-job"
    assert str(run["summary"]["checkpoint"]).startswith(str(ckpt))
    assert run["exit_code"] == 0
    (line,) = [e for e in events if e["event"] == "tracking"]
    assert line["wandb"].startswith(f"offline run {run_dir}"), line
    assert line["tensorboard"] == str(ckpt / "tensorboard")


def test_a_wandb_server_that_refuses_never_stops_or_stalls_training(
    wandb_home, no_dist_env, capsys, monkeypatch, tmp_path
):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        refusing = f"http://127.0.0.1:{sock.getsockname()[1]}"  # closed: refused
    monkeypatch.setenv("WANDB_API_KEY", "0123456789abcdef" * 2 + "01234567")  # 40 chars
    monkeypatch.setenv("WANDB_BASE_URL", refusing)
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "5")
    from trainer import train as train_mod

    code = train_mod.main(["--max_steps", "6", "--log_freq", "1", "--validation_freq", "0",
                           "--checkpoint_dir", str(tmp_path / "ckpt")])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0
    events = parse_lines(out)
    steps = [e for e in events if e["event"] == "step"]
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5, 6] and events[-1]["event"] != "error"
    assert all(s["step_s"] < 2.0 for s in steps), steps  # the training thread only queues
    warned = [line for line in err.splitlines() if line.startswith("tracking: wandb")]
    assert len(warned) == 1, err[-2000:]
    assert "0123456789abcdef" not in out + err  # the key is never printed
    (line,) = [e for e in events if e["event"] == "tracking"]  # TensorBoard still wrote
    assert "wandb" not in line and Path(line["tensorboard"]).is_dir()
