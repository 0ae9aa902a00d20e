"""Experiment tracking (issue 48): a run of the trainer appears in a real MLflow server
(read back through MLflow's REST API) and in TensorBoard event files (read by
TensorBoard's own EventAccumulator) with the values of its step lines; a tracking
server that is down or hangs never stops or stalls training."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.services.mlflow_server import MlflowServer, mlflow_server
from tests.trainer.conftest import train_here
from trainer import tracking

RUN_ARGS = ["--max_steps", "6", "--log_freq", "2", "--validation_freq", "3"]


@pytest.fixture(scope="module")
def mlflow(tmp_path_factory: pytest.TempPathFactory):
    with mlflow_server(tmp_path_factory.mktemp("mlflow")) as server:
        yield server


@pytest.mark.parametrize(
    ("event", "fields", "expected"),
    [
        ("step", {"step": 2, "loss": 3.5, "lr": 1e-4, "mfu": None, "time": 9.0},
         {"loss": 3.5, "lr": 1e-4}),
        ("step", {"step": 2, "loss": float("nan"), "slowest_host": "n1"}, {}),
        ("eval", {"step": 3, "loss": 2.0, "perplexity": 7.4},
         {"eval_loss": 2.0, "eval_perplexity": 7.4}),
        ("checkpoint_saved", {"step": 3, "path": "/x"}, {}),
    ],
    ids=["a step's numbers, not its nulls or clock", "a non-finite loss is left out",
         "an eval line becomes eval_loss", "other events track nothing"],
)  # fmt: skip
def test_which_numbers_of_an_event_are_tracked(event, fields, expected):
    assert tracking.step_metrics(event, fields) == expected


def test_the_config_becomes_flat_string_params_without_nones():
    config = {"max_steps": 6, "output_dir": None, "optim": {"learning_rate": 0.001}}
    assert tracking.flat_params(config) == {"max_steps": "6", "optim.learning_rate": "0.001"}


@pytest.mark.parametrize(
    ("output_dir", "checkpoint_dir", "expected"),
    [("/o", "/c", "/o/tensorboard"), (None, "/c", "/c/tensorboard"),
     (None, "s3://b/c", None), (None, None, None)],
)  # fmt: skip
def test_event_files_go_to_the_runs_own_local_directory(output_dir, checkpoint_dir, expected):
    found = tracking.tensorboard_dir(output_dir, checkpoint_dir)
    assert (str(found) if found else None) == expected


def test_a_uri_that_is_not_an_http_server_is_refused_with_why():
    with pytest.raises(ValueError, match="http"):
        tracking.MlflowRest("file:///tmp/mlruns", {})


def _scalars(logdir: Path, tag: str) -> dict[int, float]:
    acc = EventAccumulator(str(logdir))
    acc.Reload()
    return {e.step: e.value for e in acc.Scalars(tag)}


def test_a_run_appears_in_mlflow_and_tensorboard_with_its_step_lines_values(
    mlflow: MlflowServer, no_dist_env, capsys, monkeypatch, tmp_path
):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow.uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "issue-48")
    monkeypatch.setenv("FSDP_EKS_JOB_NAME", "tracked-job")
    monkeypatch.setenv("FSDP_EKS_IMAGE", "registry.invalid/trainer:1")
    ckpt = tmp_path / "checkpoints"
    code, events = train_here(capsys, [*RUN_ARGS, "--checkpoint_dir", str(ckpt)])
    assert code == 0
    steps = {e["step"]: e for e in events if e["event"] == "step"}
    assert sorted(steps) == [1, 2, 4, 6]

    (run,) = mlflow.runs("issue-48")
    info, data = run["info"], run["data"]
    assert info["run_name"] == "tracked-job" and info["status"] == "FINISHED"
    tags = {t["key"]: t["value"] for t in data["tags"]}
    assert tags["job_name"] == "tracked-job" and tags["image"] == "registry.invalid/trainer:1"
    assert tags["checkpoint"].startswith(str(ckpt))
    params = {p["key"]: p["value"] for p in data["params"]}
    assert params["max_steps"] == "6" and params["metrics.log_freq"] == "2"
    loss = {m["step"]: m["value"] for m in mlflow.history(info["run_id"], "loss")}
    assert loss == {s: e["loss"] for s, e in steps.items()}
    evals = [e for e in events if e["event"] == "eval"]
    eval_loss = {m["step"]: m["value"] for m in mlflow.history(info["run_id"], "eval_loss")}
    assert eval_loss == {e["step"]: e["loss"] for e in evals}

    (line,) = [e for e in events if e["event"] == "tracking"]
    assert line["mlflow"].endswith(f"/runs/{info['run_id']}")
    assert line["mlflow"].startswith(mlflow.uri)
    assert line["tensorboard"] == str(ckpt / "tensorboard")
    tb_loss = _scalars(ckpt / "tensorboard", "loss")
    assert tb_loss == pytest.approx({s: e["loss"] for s, e in steps.items()})
    assert _scalars(ckpt / "tensorboard", "lr") == pytest.approx(
        {s: e["lr"] for s, e in steps.items()}
    )


def _refusing_uri() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"  # closed: connections refused


@pytest.fixture
def hanging_uri():
    """A server that accepts connections and never answers."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    held: list[socket.socket] = []
    done = threading.Event()

    def accept() -> None:
        sock.settimeout(0.2)
        while not done.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    done.set()
    thread.join(2)
    for conn in held:
        conn.close()
    sock.close()


@pytest.mark.parametrize("broken", ["refuses", "hangs"])
def test_a_tracking_server_that_is_down_or_hangs_never_stops_or_stalls_training(
    broken, hanging_uri, no_dist_env, capsys, monkeypatch, tmp_path
):
    uri = _refusing_uri() if broken == "refuses" else hanging_uri
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    from trainer import train as train_mod

    code = train_mod.main(["--max_steps", "6", "--log_freq", "1", "--validation_freq", "0",
                           "--checkpoint_dir", str(tmp_path / "ckpt")])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0
    from tests.trainer.conftest import parse_lines

    events = parse_lines(out)
    steps = [e for e in events if e["event"] == "step"]
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5, 6] and events[-1]["event"] != "error"
    # A request that held the training thread would have held its step for its timeout.
    assert all(s["step_s"] < tracking.REQUEST_TIMEOUT_S for s in steps), steps
    warned = [line for line in err.splitlines() if line.startswith("tracking: mlflow")]
    assert len(warned) == 1, err[-2000:]
    (line,) = [e for e in events if e["event"] == "tracking"]  # TensorBoard still wrote
    assert "mlflow" not in line and _scalars(Path(line["tensorboard"]), "loss")
