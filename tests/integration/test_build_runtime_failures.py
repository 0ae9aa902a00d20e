"""A build that fails in the container runtime itself is its own class, with a hint about
the runtime, never run_step_failed ("fix that command"). Real podman: its runtime cannot
create a container in this sandbox (a RUN step's container never starts), and a podman
service of this test's own is killed mid-build (the daemon goes away)."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from commands.build_image import build_image
from skills.shared.progress import CollectingProgress
from tests.services import podman

pytestmark = pytest.mark.integration


def test_a_run_step_whose_container_cannot_start_is_a_runtime_failure(docker_api, tmp_path):
    (tmp_path / "rootfs").mkdir()
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM scratch\nCOPY rootfs /\nRUN true\n")
    result = build_image(dockerfile=str(dockerfile), tag="runtime", max_attempts=3)
    (attempt,) = result.attempts  # no fix to try: one attempt
    if "creating container" not in " ".join(attempt.log_tail):
        pytest.skip("this host's podman can run containers: no runtime failure to see")
    assert (result.status, result.error_class) == ("failed", "container_runtime_failed")
    assert "runtime" in (result.hint or "") and "fix that command" not in (result.hint or "")
    assert any("creating container" in line for line in attempt.evidence)


class _KillOnFirstStep(CollectingProgress):
    """Kills the podman service once the build has begun streaming (its first STEP)."""

    def __init__(self, service: subprocess.Popen[bytes]) -> None:
        super().__init__()
        self.service = service

    def report(self, completed: float, total: float | None = None, message: str = "") -> None:
        super().report(completed, total, message)
        if message and "STEP" in message and self.service.poll() is None:
            self.service.kill()
            self.service.wait(timeout=10)


def test_the_daemon_going_away_mid_build_is_docker_unavailable(tmp_path, monkeypatch):
    binary = podman.check()
    home = Path(tempfile.mkdtemp(prefix="fsdp-pd-"))  # a socket path has < 108 bytes
    sock = home / "podman.sock"
    command = [binary, "--root", str(home / "root"), "--runroot", str(home / "run"),
               "--tmpdir", str(home / "tmp"), "--events-backend", "file", "--cgroup-manager",
               "cgroupfs", "system", "service", "--time=0", f"unix://{sock}"]  # fmt: skip
    service = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)  # fmt: skip
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
            service.kill()
            service.wait(timeout=10)
        subprocess.run(["rm", "-rf", "--one-file-system", str(home)], check=False)
    assert service.returncode is not None  # it was killed during the build
    (attempt,) = result.attempts
    assert (result.status, result.error_class) == ("failed", "docker_unavailable"), attempt
    assert "DOCKER_HOST" in (result.hint or "")
    assert any("lost the Docker Engine API" in line for line in attempt.evidence)
