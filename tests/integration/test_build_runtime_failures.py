"""A build that fails in the container runtime itself is its own class, with a hint about
the runtime, never run_step_failed ("fix that command"), and a Docker Engine API that is
not there (or is not one) is docker_unavailable. Whatever this host's podman can do, each
failure path is seen: a scripted engine on loopback answers as podman (crun) and Docker
(runc) answer when the runtime cannot create a RUN step's container; DOCKER_HOST at a
refused port and at a socket that answers garbage; a podman service of this test's own
killed mid-build (the daemon goes away). Real podman builds the RUN step too: it fails
as a runtime failure where containers cannot run (this sandbox), or builds."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from commands.build_image import build_image
from skills.shared.errors import ToolFailure
from skills.shared.progress import CollectingProgress
from tests.services import podman
from tests.services._common import serving

pytestmark = pytest.mark.integration

RUN_STEP = "FROM scratch\nCOPY rootfs /\nRUN true\n"

# What the engines stream when the runtime cannot create the RUN step's container.
RUNTIME_ERRORS = {
    "podman (crun)": "error running container: from /usr/bin/crun creating container for "
    "[/bin/sh -c true]: setrlimit `RLIMIT_NOFILE`: Operation not permitted\n: exit status 1",
    "docker (runc)": "failed to create task for container: failed to create shim task: OCI "
    "runtime create failed: runc create failed: unable to start container process: error "
    "during container init: unknown",
}


def _context(tmp_path: Path) -> Path:
    (tmp_path / "rootfs").mkdir(exist_ok=True)
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(RUN_STEP)
    return dockerfile


@contextlib.contextmanager
def scripted_engine(build_error: str) -> Iterator[list[str]]:
    """A Docker Engine API on 127.0.0.1 that answers version and ping, and streams a build
    through its STEPs to `build_error`, as an engine whose runtime failed does. Yields the
    request paths it saw."""
    seen: list[str] = []

    class Engine(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _json(self, status: int, body: object) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            seen.append(self.path)
            if self.path.endswith("/_ping"):
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"OK")
            elif self.path.endswith("/version"):
                self._json(200, {"ApiVersion": "1.41", "Version": "scripted", "Os": "linux"})
            else:
                self._json(404, {"message": f"no such route {self.path}"})

        def do_POST(self) -> None:  # noqa: N802
            seen.append(self.path.split("?")[0])
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)  # the build context
            if "/build" not in self.path:
                self._json(404, {"message": f"no such route {self.path}"})
                return
            steps = ["FROM scratch", "COPY rootfs /", "RUN true"]
            lines: list[dict[str, object]] = [
                {"stream": f"STEP {i}/3: {step}\n"} for i, step in enumerate(steps, 1)
            ]
            lines.append({"error": build_error, "errorDetail": {"message": build_error}})
            # As the engines stream it: chunked, one JSON object a chunk.
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for line in lines:
                data = json.dumps(line).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.write(b"0\r\n\r\n")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    with serving(server), pytest.MonkeyPatch.context() as patch:
        patch.setenv("DOCKER_HOST", f"tcp://127.0.0.1:{server.server_address[1]}")
        yield seen


@pytest.mark.parametrize("engine", sorted(RUNTIME_ERRORS))
def test_a_run_step_whose_container_cannot_start_is_a_runtime_failure(engine, tmp_path):
    with scripted_engine(RUNTIME_ERRORS[engine]) as seen:
        result = build_image(dockerfile=str(_context(tmp_path)), tag="runtime", max_attempts=3)
    assert any(path.endswith("/build") for path in seen)  # it did reach the engine
    (attempt,) = result.attempts  # no fix to try: one attempt
    assert (result.status, result.error_class) == ("failed", "container_runtime_failed")
    assert "runtime" in (result.hint or "") and "fix that command" not in (result.hint or "")
    assert any(RUNTIME_ERRORS[engine][:40] in line for line in attempt.evidence)


def test_real_podman_builds_a_run_step_or_says_its_runtime_failed(docker_api, tmp_path):
    result = build_image(dockerfile=str(_context(tmp_path)), tag="runtime", max_attempts=3)
    (attempt,) = result.attempts
    if "creating container" in " ".join(attempt.log_tail):  # containers cannot run here
        assert (result.status, result.error_class) == ("failed", "container_runtime_failed")
        assert any("creating container" in line for line in attempt.evidence)
    else:
        assert result.status == "built", (result.error_class, attempt.log_tail)


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


@contextlib.contextmanager
def garbage_socket() -> Iterator[str]:
    """A unix socket that answers every connection with bytes that are not HTTP."""
    home = Path(tempfile.mkdtemp(prefix="fsdp-gb-"))  # a socket path has < 108 bytes
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(home / "g.sock"))
    listener.listen(8)
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                with contextlib.suppress(OSError):
                    conn.recv(65536)
                    conn.sendall(b"\x00\xffSSH-2.0-not-docker\r\n\r\n\x17garbage")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"unix://{home / 'g.sock'}"
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()
        subprocess.run(["rm", "-rf", str(home)], check=False)


@pytest.mark.parametrize("where", ["a refused port", "a socket that answers garbage"])
def test_no_engine_at_docker_host_is_docker_unavailable(where, tmp_path, monkeypatch):
    dockerfile = _context(tmp_path)
    with contextlib.ExitStack() as stack:
        if where == "a refused port":
            host = f"tcp://127.0.0.1:{_refused_port()}"
        else:
            host = stack.enter_context(garbage_socket())
        monkeypatch.setenv("DOCKER_HOST", host)
        with pytest.raises(ToolFailure) as failure:
            build_image(dockerfile=str(dockerfile), tag="nowhere")
    assert failure.value.code == "docker_unavailable"
    assert "DOCKER_HOST" in failure.value.hint
    assert failure.value.details["docker_host"] == host


class _KillOnFirstStep(CollectingProgress):
    """Kills the podman service once the build has begun streaming (its first STEP): the
    whole daemon, its process group. Mid-build podman starts a copy of itself; killing
    only the first process once left that copy holding the build's connection open, and
    the build waited on it for good (seen once in a full run)."""

    def __init__(self, service: subprocess.Popen[bytes]) -> None:
        super().__init__()
        self.service = service

    def report(self, completed: float, total: float | None = None, message: str = "") -> None:
        super().report(completed, total, message)
        if message and "STEP" in message and self.service.poll() is None:
            _kill_group(self.service)


def _kill_group(service: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(service.pid, signal.SIGKILL)
    service.wait(timeout=10)


def test_the_daemon_going_away_mid_build_is_docker_unavailable(tmp_path, monkeypatch):
    binary = podman.check()
    home = Path(tempfile.mkdtemp(prefix="fsdp-pd-"))  # a socket path has < 108 bytes
    sock = home / "podman.sock"
    command = [binary, "--root", str(home / "root"), "--runroot", str(home / "run"),
               "--tmpdir", str(home / "tmp"), "--events-backend", "file", "--cgroup-manager",
               "cgroupfs", "system", "service", "--time=0", f"unix://{sock}"]  # fmt: skip
    service = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        monkeypatch.setenv("DOCKER_HOST", f"unix://{sock}")
        # A layer big enough that podman is still copying it when it is killed.
        with open(tmp_path / "weights.bin", "wb") as out:
            for _ in range(64):
                out.write(os.urandom(1 << 20))
        dockerfile = tmp_path / "Dockerfile"
        dockerfile.write_text("FROM scratch\nCOPY weights.bin /w\nCOPY weights.bin /w2\n")
        progress = _KillOnFirstStep(service)
        result = build_image(dockerfile=str(dockerfile), tag="gone", progress=progress)
    finally:
        if service.poll() is None:
            _kill_group(service)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(service.pid, signal.SIGKILL)  # any copy it left
        subprocess.run(["rm", "-rf", "--one-file-system", str(home)], check=False)
    assert service.returncode is not None  # it was killed during the build
    (attempt,) = result.attempts
    assert (result.status, result.error_class) == ("failed", "docker_unavailable"), attempt
    assert "DOCKER_HOST" in (result.hint or "")
    assert any("lost the Docker Engine API" in line for line in attempt.evidence)
