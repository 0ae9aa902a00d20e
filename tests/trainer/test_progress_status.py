"""Rank 0 posts its progress to Kubeflow Trainer v2's status server (trainer/progress_status.py),
tested against the HTTPS stand-in of upstream v2.3.0's server (tests/services/trainer_status.py):
what arrives, how often (a clock of the test's, no sleeps), with the rotating token, and that
a server that is down, hangs, fails or has another CA never stops or slows training."""

from __future__ import annotations

import datetime
import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.services.trainer_status import TrainerStatusServer, make_ca_file
from tests.trainer.conftest import ROOT, parse_lines, trainer_env
from tests.trainer.test_checkpoint_resume import events_of, torchrun
from trainer import progress_status
from trainer import train as train_mod
from trainer.progress_status import (
    MIN_INTERVAL_S,
    POST_TIMEOUT_S,
    Endpoint,
    ProgressReporter,
    StatusPoster,
    trainer_status,
)

NS, JOB = "team-a", "llama"
NOW = datetime.datetime(2026, 12, 6, 9, 0, 0, 500000, tzinfo=datetime.timezone.utc)
# Step lines as the trainer prints them (trainer/loop.py on_log), less the fields not posted.
LINE = {"loss": 6.1, "lr": 1e-4, "tokens_per_s": 1234.5, "mfu": 0.41, "step_s": 0.5}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    """The status server's write: what reached the TrainJob, in order."""

    def __init__(self) -> None:
        self.written: list[dict] = []

    def __call__(self, namespace: str, trainjob: str, status: dict) -> None:
        assert (namespace, trainjob) == (NS, JOB)
        self.written.append(status)

    def metrics(self, i: int) -> dict[str, str]:
        return {m["name"]: m["value"] for m in self.written[i]["metrics"]}


@pytest.fixture
def recorder():
    return Recorder()


@pytest.fixture
def server(recorder):
    with TrainerStatusServer(on_status=recorder) as srv:
        yield srv


def env_of(srv: TrainerStatusServer) -> dict[str, str]:
    return {e["name"]: e["value"] for e in srv.pod_env(NS, JOB)}


def reporter_for(srv: TrainerStatusServer, clock: Clock) -> ProgressReporter:
    endpoint = Endpoint.from_environ(env_of(srv))
    assert endpoint is not None
    return ProgressReporter(StatusPoster(endpoint, clock=clock), now=lambda: NOW)


def feed(reporter: ProgressReporter, event: str, **fields) -> None:
    reporter.on_event(event, fields)
    assert reporter.poster.wait_idle(10), "a post did not finish"


# --- what is posted


def test_the_body_carries_progress_eta_and_the_four_metrics_by_name():
    body = trainer_status(30, 120, 0.5, {"step": 30, **LINE}, NOW)
    assert body == {
        "trainerStatus": {
            "progressPercentage": 25,
            "estimatedRemainingSeconds": 45,
            "metrics": [
                {"name": "step", "value": "30"},
                {"name": "loss", "value": "6.1"},
                {"name": "tokens_per_s", "value": "1234.5"},
                {"name": "mfu", "value": "0.41"},
            ],
            "lastUpdatedTime": "2026-12-06T09:00:00Z",
        }
    }


@pytest.mark.parametrize(
    ("step", "max_steps", "percent", "eta"),
    [(0, 10, 0, 5), (1, 3, 33, 1), (119, 120, 99, 0), (120, 120, 100, 0), (7, 0, None, None)],
)
def test_progress_is_whole_percent_reaching_100_only_at_max_steps(step, max_steps, percent, eta):
    status = trainer_status(step, max_steps, 0.5, {"step": step}, NOW)["trainerStatus"]
    assert status.get("progressPercentage") == percent
    assert status.get("estimatedRemainingSeconds") == eta


def test_a_metric_without_a_value_is_left_out_as_the_crd_wants_no_empty_value():
    # MFU is null on a CPU (no peak FLOP/s); a NaN loss is null in the step line too.
    body = trainer_status(1, 2, None, {"step": 1, "loss": float("nan"), "mfu": None}, NOW)
    assert body["trainerStatus"]["metrics"] == [{"name": "step", "value": "1"}]
    assert "estimatedRemainingSeconds" not in body["trainerStatus"]


@pytest.mark.parametrize(
    "environ",
    [
        {},
        {"KUBEFLOW_TRAINER_SERVER_URL": "https://x/status"},
        {"KUBEFLOW_TRAINER_SERVER_URL": "https://x/status", "KUBEFLOW_TRAINER_SERVER_TOKEN": "/t"},
        {"KUBEFLOW_TRAINER_SERVER_CA_CERT": "/c", "KUBEFLOW_TRAINER_SERVER_TOKEN": "/t"},
    ],
)
def test_without_the_three_variables_nothing_is_created(environ):
    threads = threading.active_count()
    assert progress_status.from_environ(environ, rank=0) is None
    assert threading.active_count() == threads


def test_only_rank_0_reports(server):
    assert progress_status.from_environ(env_of(server), rank=1) is None
    reporter = progress_status.from_environ(env_of(server), rank=0)
    assert reporter is not None
    reporter.close()


# --- posting to the stand-in


def test_posts_arrive_with_the_body_and_are_authorized(server, recorder):
    reporter = reporter_for(server, Clock())
    feed(reporter, "start", max_steps=40)
    feed(reporter, "step", step=10, **LINE)
    path = env_of(server)["KUBEFLOW_TRAINER_SERVER_URL"].split(str(server.port), 1)[1]
    assert server.requests == [("POST", path, 200)]
    assert recorder.written == [
        trainer_status(10, 40, 0.5, {"step": 10, **LINE}, NOW)["trainerStatus"]
    ]
    assert reporter.poster.sent == 1 and reporter.poster.failures == 0


def test_posts_are_at_most_one_per_5_s_of_the_clock_and_the_end_always_goes(server, recorder):
    clock = Clock()
    reporter = reporter_for(server, clock)
    feed(reporter, "start", max_steps=20)
    for step in range(1, 21):  # a step line every 0.75 s
        clock.now = (step - 1) * 0.75
        feed(reporter, "step", step=step, **LINE)
    clock.now += 0.1
    feed(reporter, "summary", steps=20)
    posted = [int(recorder.metrics(i)["step"]) for i in range(len(recorder.written))]
    # t = 0, 5.25, 10.5 (steps 1, 8, 15), then the end (step 20) at once.
    assert posted == [1, 8, 15, 20]
    assert MIN_INTERVAL_S == 5.0
    assert recorder.written[-1]["progressPercentage"] == 100
    assert recorder.written[-1]["estimatedRemainingSeconds"] == 0


def test_the_end_is_not_posted_twice_when_its_step_line_already_went(server, recorder):
    clock = Clock()
    reporter = reporter_for(server, clock)
    feed(reporter, "start", max_steps=3)
    feed(reporter, "step", step=3, **LINE)
    feed(reporter, "summary", steps=3)
    assert len(recorder.written) == 1


def test_a_resumed_run_already_at_max_steps_reports_100(server, recorder):
    reporter = reporter_for(server, Clock())
    feed(reporter, "start", max_steps=30, resumed_from=30)
    feed(reporter, "summary", steps=30)
    assert recorder.written[0]["progressPercentage"] == 100
    assert recorder.written[0]["metrics"] == [{"name": "step", "value": "30"}]


def test_the_token_file_is_read_again_for_each_post_so_a_rotated_token_works(server, recorder):
    clock = Clock()
    reporter = reporter_for(server, clock)
    feed(reporter, "start", max_steps=100)
    feed(reporter, "step", step=1, **LINE)
    server.rotate_token(NS, JOB)  # the old token is refused from now on
    clock.now = MIN_INTERVAL_S
    feed(reporter, "step", step=2, **LINE)
    assert [code for *_, code in server.requests] == [200, 200]
    assert reporter.poster.failures == 0 and len(recorder.written) == 2


def test_offering_never_waits_for_a_server_that_hangs(recorder):
    release = threading.Event()
    with TrainerStatusServer(on_status=lambda *_: release.wait(30)) as srv:
        reporter = reporter_for(srv, Clock())
        reporter.on_event("start", {"max_steps": 10})
        try:
            reporter.on_event("step", {"step": 1, **LINE})  # its post hangs
            time.sleep(0.2)  # the post is in flight now
            started = time.perf_counter()
            for step in range(2, 10):
                reporter.on_event("step", {"step": step, **LINE})
            reporter.on_event("summary", {"steps": 9})
            assert time.perf_counter() - started < 0.2
            assert not reporter.poster.wait_idle(0)
        finally:
            release.set()


# --- a real run with a server that does not answer well


def _down(tmp_path: Path, recorder: Recorder):
    srv = TrainerStatusServer(on_status=recorder, workdir=tmp_path / "down")
    srv.start()
    env = env_of(srv)
    srv.stop()  # the port refuses now
    return env, lambda: None


def _hangs(tmp_path: Path, recorder: Recorder):
    release = threading.Event()
    srv = TrainerStatusServer(on_status=lambda *_: release.wait(30), workdir=tmp_path / "hang")
    srv.start()

    def stop() -> None:
        release.set()
        srv.stop()

    return env_of(srv), stop


def _fails(tmp_path: Path, recorder: Recorder):
    def fail(*_: object) -> None:
        raise RuntimeError("the API server is down")

    srv = TrainerStatusServer(on_status=fail, workdir=tmp_path / "500")
    srv.start()
    return env_of(srv), srv.stop


def _other_ca(tmp_path: Path, recorder: Recorder):
    srv = TrainerStatusServer(on_status=recorder, workdir=tmp_path / "ca")
    srv.start()
    env = env_of(srv)
    make_ca_file(Path(env["KUBEFLOW_TRAINER_SERVER_CA_CERT"]))
    return env, srv.stop


@pytest.mark.parametrize("broken", [_down, _hangs, _fails, _other_ca], ids=lambda f: f.__name__[1:])
def test_a_server_that_does_not_answer_well_never_stops_or_slows_training(
    broken, no_dist_env, capsys, monkeypatch, tmp_path, recorder
):
    env, stop = broken(tmp_path, recorder)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    try:
        code = train_mod.main(["--max_steps", "4", "--log_freq", "1"])
    finally:
        stop()
    out, err = capsys.readouterr()
    events = parse_lines(out)
    assert code == 0
    steps = [e for e in events if e["event"] == "step"]
    assert [s["step"] for s in steps] == [1, 2, 3, 4] and events[-1]["event"] == "summary"
    # A post that waited on the network would have held its step for POST_TIMEOUT_S.
    assert all(s["step_s"] < POST_TIMEOUT_S for s in steps), steps
    # This run's warnings only: an earlier test's poster thread (a daemon, left posting
    # when its server stopped) may print its own first failure to the stderr captured now,
    # as seen with two suites on one machine.
    ours = f"posting progress to {env[progress_status.ENV_URL]} failed"
    warnings = [line for line in err.splitlines() if ours in line]
    assert len(warnings) == 1 and recorder.written == [], err


# --- two ranks under torchrun


@pytest.mark.integration
def test_under_torchrun_only_rank_0_posts_and_the_last_post_is_the_last_step(
    server, recorder, tmp_path
):
    env = {**trainer_env(), **env_of(server)}
    args = ["--max_steps", "12", "--log_freq", "1", "--seq_len", "64", "--train_batch_size", "4"]
    proc = subprocess.run(
        torchrun(2, [*args, "--validation_freq", "0"]),
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "trainer status" not in proc.stderr
    events = events_of(proc.stdout)
    elapsed = events[-1]["elapsed_s"]
    steps = [int(recorder.metrics(i)["step"]) for i in range(len(recorder.written))]
    # Both ranks would post step 1 at once (a first offer is never held back).
    assert steps[0] == 1 and steps == sorted(set(steps)), steps
    assert len(steps) <= 2 + elapsed // MIN_INTERVAL_S
    last = recorder.written[-1]
    assert steps[-1] == 12 and last["progressPercentage"] == 100
    assert last["estimatedRemainingSeconds"] == 0
    metrics = recorder.metrics(len(steps) - 1)
    assert set(metrics) == {"step", "loss", "tokens_per_s"}  # no MFU on a CPU
    final_line = [e for e in events if e["event"] == "step"][-1]
    assert float(metrics["loss"]) == final_line["loss"]
    json.dumps(last)  # what the TrainJob holds is plain JSON
