"""Issue 30 (hardenfiles): every file the suite reads or writes goes through the bounded,
no-link, regular-file-only reader and writer. Each test is the issue's reproduction,
then the rule that holds.

Items: 4 (a linked server.log or server folder), 9 (job.json, server.json and
ecr_repository.json read unbounded), 13 (a copied record stops another server: also
tests/integration/test_model_server_local.py, on a real server), 17 (a stray file in
model_servers/), 18 (a reused pid reported as "its process has ended"). Items 7, 8 and
15 (the trainer's files): tests/trainer/test_token_cache_hardening.py; 14 and 19 (the
listing cache): tests/integration/test_listing_cache.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from commands.delete_model_server import delete_model_server
from commands.deploy_model_server import deploy_model_server
from commands.get_model_server import get_model_server
from commands.get_training_job import get_training_job
from commands.list_model_servers import list_model_servers
from commands.list_training_jobs import list_training_jobs
from skills.model_server.local import RECORD, servers_dir
from skills.operations import remembered
from skills.shared.errors import ToolFailure

pytestmark = pytest.mark.integration

# What every hostile record must be answered within (a FIFO used to hang for ever).
ANSWER_S = 10.0


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "state"
    path.mkdir()
    monkeypatch.setenv("FSDP_EKS_STATE_DIR", str(path))
    return path


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder the suite has no business writing: a link's target."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "precious.txt").write_text("precious\n")
    return path


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A directory that passes check_model_dir (nothing is ever started from it here)."""
    path = tmp_path / "model"
    path.mkdir()
    (path / "config.json").write_text('{"model_type": "llama"}')
    (path / "model.safetensors").write_bytes(b"")
    return path


def within(seconds: float, call: Callable[[], Any]) -> Any:
    """call()'s result or exception, failing the test if it takes longer (a hang)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"no answer within {seconds} s (a hang)"
    if "error" in box:
        raise box["error"]
    return box["value"]


def typed(call: Callable[[], Any]) -> ToolFailure:
    """The ToolFailure call() raises, in time (a MemoryError, RecursionError or hang is
    the bug)."""
    with pytest.raises(ToolFailure) as caught:
        within(ANSWER_S, call)
    assert caught.value.hint, caught.value
    return caught.value


def _hostile(path: Path, kind: str) -> None:
    """Put `kind` in place of the record file `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "zero-link":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "deep":
        path.write_text("[" * 200_000 + "]" * 200_000)
    elif kind == "huge":  # sparse: 20 GB of nothing, on no disk
        with open(path, "wb") as out:
            out.truncate(20 << 30)
    elif kind == "link":
        target = path.parent / "elsewhere.json"
        target.write_text("{}")
        path.symlink_to(target)
    else:
        raise AssertionError(kind)


HOSTILE = ["zero-link", "fifo", "deep", "huge", "link"]


# --- item 9: records read unbounded --------------------------------------------------------


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_server_record_is_a_typed_error_in_time(state, kind):
    _hostile(servers_dir() / "web" / RECORD, kind)
    refused = typed(lambda: get_model_server(name="web"))
    assert refused.code == "job_record_corrupt", refused.message
    listed = within(ANSWER_S, lambda: list_model_servers(target="local")).servers
    assert [(s.name, s.status) for s in listed] == [("web", "failed")]
    deleted = within(ANSWER_S, lambda: delete_model_server(name="web", confirm=True))
    assert deleted.status == "deleted" and not (servers_dir() / "web").exists()


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_job_record_is_a_typed_error_in_time(tmp_path, kind):
    runs = tmp_path / "runs"
    _hostile(runs / "j" / "job.json", kind)
    refused = typed(lambda: get_training_job(job_name="j", runs_dir=str(runs)))
    assert refused.code == "job_record_corrupt", refused.message
    # A list reads each record's submission time (its order, issue 45): bounded too.
    listed = within(ANSWER_S, lambda: list_training_jobs(runs_dir=str(runs))).jobs
    assert [(j.job_name, j.status) for j in listed] == [("j", "unknown")]


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_remembered_repository_is_no_default(state, kind):
    """ecr_repository.json only gives a default: whatever stands there instead of a
    record is no default (not a hang, a MemoryError or a RecursionError)."""
    _hostile(state / remembered.FILE_NAME, kind)
    assert within(ANSWER_S, remembered.recall) is None


def test_a_remembered_repository_is_never_written_through_a_link(state, outside):
    (state / remembered.FILE_NAME).symlink_to(outside / "precious.txt")
    remembered.remember("team/trainer", "us-west-2", "push_to_ecr")  # best effort: no raise
    assert (outside / "precious.txt").read_text() == "precious\n"


# --- item 4: the server's folder and log are never followed out ----------------------------


def test_deploy_never_truncates_a_linked_server_log(state, outside, model):
    folder = servers_dir() / "web"
    folder.mkdir(parents=True)
    (folder / "server.log").symlink_to(outside / "precious.txt")
    refused = typed(lambda: deploy_model_server(name="web", model=str(model), device="cpu"))
    assert refused.code == "path_not_allowed", refused.message
    assert (outside / "precious.txt").read_text() == "precious\n"
    assert not (folder / RECORD).exists()  # refused before anything was started


@pytest.mark.parametrize("dry_run", [True, False])
def test_a_linked_server_folder_is_refused_not_written_into(state, outside, model, dry_run):
    servers_dir().mkdir(parents=True)
    (servers_dir() / "web").symlink_to(outside)
    refused = typed(
        lambda: deploy_model_server(name="web", model=str(model), device="cpu", dry_run=dry_run)
    )
    assert refused.code == "path_not_allowed", refused.message
    assert sorted(p.name for p in outside.iterdir()) == ["precious.txt"]
    for call in (
        lambda: get_model_server(name="web"),
        lambda: delete_model_server(name="web", confirm=True),
    ):
        assert typed(call).code == "path_not_allowed"
    assert (servers_dir() / "web").is_symlink() and (outside / "precious.txt").exists()
    listed = list_model_servers(target="local").servers
    assert [(s.name, s.status) for s in listed] == [("web", "failed")]


# --- item 17: a stray file in model_servers/ ------------------------------------------------


def test_a_stray_file_among_the_servers_breaks_no_listing(state):
    servers_dir().mkdir(parents=True)
    (servers_dir() / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    (servers_dir() / "notes.txt").write_text("my servers\n")
    assert list_model_servers(target="local").servers == []


# --- items 13 and 18: a process is the server of the folder it was recorded in --------------


@pytest.fixture
def stand_in() -> Iterator[subprocess.Popen]:
    """A live process that is not ours (a reused pid's new owner)."""
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True
    )
    yield process
    process.kill()
    process.wait()


def _record(name: str, pid: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": name, "model": "/m", "port": 8000, "argv": [], "pid": pid,
        "pid_started": psutil.Process(pid).create_time(), "started_at": time.time(), **extra,
    }  # fmt: skip


def test_a_reused_pid_is_reported_as_reused_not_as_an_ended_process(state, stand_in):
    folder = servers_dir() / "web"
    folder.mkdir(parents=True)
    (folder / RECORD).write_text(json.dumps(_record("web", stand_in.pid)))
    got = get_model_server(name="web")
    assert got.status == "failed" and "its process has ended" not in got.message
    assert f"pid {stand_in.pid} was reused" in got.message and "gone" in got.message
    assert stand_in.poll() is None  # looked at, never signalled


def test_a_record_copied_into_another_folder_stops_nothing(state):
    """The reproduction: server `b`'s folder holds a copy of server `a`'s record; deleting
    `b` stopped `a`. (Here `a` is a process that carries a's marker as the suite before
    this fix set it; the real server: test_model_server_local.py.)"""
    server_a = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", "-m",
         "transformers.cli.transformers", "serve"],
        env={**os.environ, "FSDP_EKS_MODEL_SERVER": "a"}, start_new_session=True,
    )  # fmt: skip
    try:
        for name in ("a", "b"):
            (servers_dir() / name).mkdir(parents=True, exist_ok=True)
            (servers_dir() / name / RECORD).write_text(json.dumps(_record("a", server_a.pid)))
        got = typed(lambda: get_model_server(name="b"))
        assert got.code == "job_record_corrupt" and "names server 'a'" in got.message
        deleted = delete_model_server(name="b", confirm=True)
        assert deleted.status == "deleted" and "stopped" not in deleted.message
        time.sleep(0.5)
        assert server_a.poll() is None, "deleting b stopped a's process"
        assert (servers_dir() / "a" / RECORD).exists()
    finally:
        server_a.kill()
        server_a.wait()


# --- the same reader for the checkpoint owner marker ----------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "zero-link", "link"])
def test_a_hostile_checkpoint_owner_marker_is_typed_in_time(tmp_path, kind):
    from skills.training_job_deployer.targets.checkpoint_owner import OWNER_FILE, claim

    checkpoints = tmp_path / "checkpoints"
    _hostile(checkpoints / OWNER_FILE, kind)
    refused = typed(lambda: claim(checkpoints, tmp_path / "runs" / "j", adopt=False))
    assert refused.code in ("path_not_allowed", "invalid_input"), refused.message
