"""Local serving for real (issue 24): the demo model is trained briefly (the trainer's
main in this process, with the flags the local target plans: serving, not the launch,
is the subject), exported by `python -m trainer.export`'s main (in this process), and
served through the tools by `transformers serve`; plain HTTP (urllib) gets completions
from it. Bad model paths, a port in use and a server that dies on start are typed
errors; delete stops the process, and only a process whose identity matches."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import anyio
import psutil
import pytest
from mcp import Client

from commands.delete_model_server import delete_model_server
from commands.deploy_model_server import deploy_model_server
from commands.deploy_training_job import deploy_training_job
from commands.get_model_server import get_model_server
from commands.list_model_servers import list_model_servers
from mcp_server import build_server
from mcp_server.workspace import Workspace
from skills.model_server.local import RECORD, servers_dir
from skills.shared.errors import ToolFailure
from skills.shared.progress import CollectingProgress

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def state(tmp_path_factory):
    """One state directory for the module's servers (the tools read FSDP_EKS_STATE_DIR)."""
    with pytest.MonkeyPatch.context() as patch:
        path = tmp_path_factory.mktemp("state")
        patch.setenv("FSDP_EKS_STATE_DIR", str(path))
        yield path


@pytest.fixture(scope="module")
def exported(tmp_path_factory, state) -> Path:
    """The demo model, trained for a few steps and exported as HF safetensors."""
    runs = tmp_path_factory.mktemp("runs")
    # The trainer's flags as the local target plans them, its main run in this process
    # (a world of one): the trained model is the input here, not the launch
    # (test_local_training launches jobs), and torchrun and a rank of their own would
    # each import torch again.
    plan = deploy_training_job(
        job_name="serve", runs_dir=str(runs), max_steps=6, gpu_per_node=1, dry_run=True
    ).plan
    argv: list[str] = plan.model_dump()["argv"]
    from trainer.export import main as export_main
    from trainer.train import main as train_main

    printed = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(printed):
        for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
            patch.delenv(var, raising=False)
        code = train_main(argv[argv.index("trainer") + 1 :])
    assert code == 0, printed.getvalue()[-2000:]
    assert '"event": "checkpoint_saved"' in printed.getvalue(), printed.getvalue()[-2000:]
    out = runs / "serve" / "export"
    # `python -m trainer.export`'s main, in this process: one torch start fewer (the
    # export is the input here; tests/trainer/test_export.py is its subject).
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = export_main(["--checkpoint", str(runs / "serve" / "checkpoints"), "--out", str(out)])
    assert code == 0, printed.getvalue()
    return out


@pytest.fixture(scope="module")
def served(exported):
    progress = CollectingProgress()
    server = deploy_model_server(name="demo", model=str(exported), device="cpu", progress=progress)
    yield server, progress
    try:
        delete_model_server(name="demo", confirm=True)
    except ToolFailure:
        pass  # a test deleted it already


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def record_of(name: str) -> dict:
    return json.loads((servers_dir() / name / RECORD).read_text())


def test_the_served_export_answers_a_completion_over_plain_http(served, exported):
    server, progress = served
    assert server.status == "ready" and server.ready_replicas == 1
    assert server.endpoint.startswith("http://127.0.0.1:") and server.model == str(exported)
    assert server.smoke  # the tool's own smoke request got an answer
    assert progress.events[-1].message.startswith("answered")

    with urllib.request.urlopen(f"{server.endpoint}/v1/models", timeout=30) as response:
        assert json.loads(response.read())["object"] == "list"
    completion = post(
        f"{server.endpoint}/v1/completions",
        {"model": server.model, "prompt": "The model", "max_tokens": 8},
    )
    assert isinstance(completion["choices"][0]["text"], str)
    assert 1 <= completion["usage"]["completion_tokens"] <= 8
    chat = post(
        f"{server.endpoint}/v1/chat/completions",
        {"model": server.model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
    )
    assert chat["choices"][0]["message"]["role"] == "assistant"
    # The prompt went through the exported chat template: BOS + "<|user|>\nHi\n<|assistant|>\n".
    assert chat["usage"]["prompt_tokens"] == 1 + len("<|user|>\nHi\n<|assistant|>\n")


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs the curl binary")
def test_the_results_curl_line_works_as_given(served):
    server, _ = served
    done = subprocess.run(shlex.split(server.curl), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and json.loads(done.stdout)["object"] == "chat.completion"


def test_get_and_list_report_the_running_server(served):
    server, _ = served
    got = get_model_server(name="demo")
    assert (got.status, got.endpoint, got.model) == ("ready", server.endpoint, server.model)
    listed = list_model_servers(target="local").servers
    assert [(s.name, s.status, s.endpoint) for s in listed if s.name == "demo"] == [
        ("demo", "ready", server.endpoint)
    ]


def test_deploying_the_same_server_again_starts_nothing(served):
    server, _ = served
    pid = record_of("demo")["pid"]
    again = deploy_model_server(name="demo", model=server.model, device="cpu")
    assert again.status == "ready" and again.endpoint == server.endpoint
    assert "already running" in again.message and record_of("demo")["pid"] == pid


def test_a_port_in_use_is_a_typed_error(served, exported):
    server, _ = served
    taken = int(server.endpoint.rsplit(":", 1)[1])
    with pytest.raises(ToolFailure) as by_our_server:
        deploy_model_server(name="other", model=str(exported), port=taken)
    with socket.socket() as listener:  # a port any other program listens on
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        with pytest.raises(ToolFailure) as by_a_stranger:
            deploy_model_server(name="other", model=str(exported), port=port, dry_run=True)
    for failure, in_use in ((by_our_server, taken), (by_a_stranger, port)):
        assert failure.value.code == "port_in_use" and failure.value.details["port"] == in_use
    assert not (servers_dir() / "other").exists()


def _bad_models(root: Path) -> dict[str, tuple[Path, str]]:
    root.mkdir(parents=True, exist_ok=True)
    (root / "file.json").write_text("{}")
    (root / "checkpoint" / "step-1").mkdir(parents=True)
    (root / "no-weights").mkdir()
    (root / "no-weights" / "config.json").write_text("{}")
    (root / "no-config").mkdir()
    (root / "no-config" / "model.safetensors").write_bytes(b"")
    return {
        "missing": (root / "nope", "not_found"),
        "file": (root / "file.json", "not_a_directory"),
        "checkpoint": (root / "checkpoint", "model_invalid"),
        "no-weights": (root / "no-weights", "model_invalid"),
        "no-config": (root / "no-config", "model_invalid"),
    }


@pytest.mark.parametrize("case", ["missing", "file", "checkpoint", "no-weights", "no-config"])
def test_a_bad_model_path_is_a_typed_error_and_starts_nothing(case, state, tmp_path):
    model, code = _bad_models(tmp_path)[case]
    for dry_run in (True, False):
        with pytest.raises(ToolFailure) as failure:
            deploy_model_server(name="bad", model=str(model), dry_run=dry_run)
        assert failure.value.code == code, failure.value.message
    assert not (servers_dir() / "bad").exists()


def test_a_server_that_dies_on_start_is_a_typed_error_with_its_log(state, tmp_path):
    model = tmp_path / "broken"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "no_such_architecture"}')
    (model / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(ToolFailure) as failure:
        deploy_model_server(name="broken", model=str(model), device="cpu")
    assert failure.value.code == "server_exited"
    assert failure.value.details["log_tail"], "the log tail says why"
    assert get_model_server(name="broken").status == "failed"
    assert delete_model_server(name="broken", confirm=True).status == "deleted"


def test_delete_needs_confirm_then_stops_the_process(exported):
    # Deployed as an agent does: over MCP (settings nested per target, the model inside
    # the server's workspace), where the start runs as an operation the call waits for.
    async def deploy():
        workspace = Workspace.create(str(exported.parents[1]))
        async with Client(build_server(workspace=workspace)) as client:
            return await client.call_tool(
                "deploy_model_server",
                {
                    "name": "doomed",
                    "model": str(exported),
                    "local": {"device": "cpu"},
                    "wait_seconds": 240,
                },
            )

    answer = anyio.run(deploy)
    assert not answer.is_error, answer.content[0].text
    server = answer.structured_content
    assert server["status"] == "ready" and server["endpoint"].startswith("http://127.0.0.1:")
    pid = record_of("doomed")["pid"]
    with pytest.raises(ToolFailure) as refused:
        delete_model_server(name="doomed")
    assert refused.value.code == "confirmation_required" and psutil.pid_exists(pid)

    deleted = delete_model_server(name="doomed", confirm=True)
    assert deleted.status == "deleted" and f"process {pid} stopped" in deleted.message
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    with pytest.raises(ToolFailure) as gone:
        get_model_server(name="doomed")
    assert gone.value.code == "not_found"


def test_delete_never_signals_a_process_the_record_does_not_identify(served):
    """A record edited to point at another process (ours, but not a server): delete
    removes the record and leaves that process alone."""
    server, _ = served
    stranger = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        folder = servers_dir() / "forged"
        folder.mkdir(parents=True)
        forged = {
            **record_of("demo"),
            "name": "forged",
            "pid": stranger.pid,
            "pid_started": psutil.Process(stranger.pid).create_time(),
        }
        (folder / RECORD).write_text(json.dumps(forged))
        assert get_model_server(name="forged").status == "failed"
        deleted = delete_model_server(name="forged", confirm=True)
        assert "not signalled" in deleted.message and stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()
    assert get_model_server(name="demo").status == "ready"  # the real one untouched
    assert os.environ["FSDP_EKS_STATE_DIR"] in str(servers_dir())


def test_deleting_a_copy_of_a_servers_record_stops_nothing(served):
    """Issue 30 item 13, the reproduction: demo's record copied into another folder
    (naming demo inside); deleting that folder's server stopped demo."""
    folder = servers_dir() / "copy"
    folder.mkdir(parents=True)
    (folder / RECORD).write_text(json.dumps(record_of("demo")))
    assert get_model_server(name="demo").status == "ready"
    deleted = delete_model_server(name="copy", confirm=True)
    assert deleted.status == "deleted" and "stopped" not in deleted.message
    assert get_model_server(name="demo").status == "ready"


def test_a_server_of_the_same_name_in_another_state_directory_stops_nothing(
    served, tmp_path, monkeypatch
):
    """The same copy where the name matches too: another state directory's `demo`. The
    process is the server of the folder it was started for, not of any folder named so."""
    copy = record_of("demo")
    monkeypatch.setenv("FSDP_EKS_STATE_DIR", str(tmp_path / "other-state"))
    (servers_dir() / "demo").mkdir(parents=True)
    (servers_dir() / "demo" / RECORD).write_text(json.dumps(copy))
    assert get_model_server(name="demo").status == "failed"  # not this directory's server
    deleted = delete_model_server(name="demo", confirm=True)
    assert deleted.status == "deleted" and "stopped" not in deleted.message
    monkeypatch.undo()
    assert get_model_server(name="demo").status == "ready"
