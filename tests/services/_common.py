"""Small shared helpers for the local test services."""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import socket
import socketserver
import subprocess
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


class MissingBinary(RuntimeError):
    """A system binary a service needs is not installed (the message says how to install it)."""


def require(check: Callable[[], object]) -> None:
    """Run a service's `check()` in a test: a missing binary skips the test, except under
    CI=true, where it fails (CI installs every service: a skip there would hide one)."""
    import pytest

    try:
        check()
    except MissingBinary as exc:
        if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
            pytest.fail(f"{exc} (CI is set: missing services fail instead of skipping)")
        pytest.skip(str(exc))


def find_binary(*names: str, apt: str) -> str:
    """The path of the first of `names` on PATH (or in /usr/bin, /usr/sbin); else MissingBinary."""
    for name in names:
        found = shutil.which(name) or next(
            (p for p in (f"/usr/bin/{name}", f"/usr/sbin/{name}") if os.access(p, os.X_OK)), None
        )
        if found:
            return found
    raise MissingBinary(f"{names[0]} not installed: apt-get install {apt}")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (for servers that cannot report a port-0 bind)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


# Claims that every copy of the suite on this machine honours (flock: released when the
# holder closes it or exits, so a killed session leaves none behind).
CLAIMS = Path(tempfile.gettempdir()) / "fsdp-eks-test-claims"
# Ports a stand-in hands to a process that binds them later (a pod's containerPort):
# below the Slurm script's rendezvous ports (20000-29999) and Linux's ephemeral ports
# (32768+), which other processes' connections and bind(0) take meanwhile.
RESERVED_PORTS = range(10_000, 20_000)
_HELD: deque[Any] = deque()
_HELD_MAX = 512  # the oldest claims go first: their pods ended long ago


def claim(kind: str, choices: range) -> int:
    """One of `choices` that no other process on this machine holds a `kind` claim on,
    claimed until this process exits (or _HELD_MAX later claims): a stand-in's port or
    job-id block that two copies of the suite must not share."""
    folder = CLAIMS / kind
    folder.mkdir(parents=True, exist_ok=True)
    for _ in range(4 * len(choices)):
        value = choices[secrets.randbelow(len(choices))]
        handle = open(folder / f"{value}.lock", "a+b")  # noqa: SIM115 (held: the claim)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            continue
        _HELD.append(handle)
        while len(_HELD) > _HELD_MAX:
            _HELD.popleft().close()
        return value
    raise RuntimeError(f"every {kind} claim in {choices} is held by other processes")


def reserved_port(host: str = "127.0.0.1") -> int:
    """A port no other copy of the suite will hand out, outside the ephemeral range, and
    free now: for a process that binds it later (free_port's bind(0) port may be taken
    meanwhile by any process's outgoing connection)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for _ in range(100):
        port = claim("port", RESERVED_PORTS)
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:  # something outside the suite listens there
                continue
        return port
    raise RuntimeError(f"no free port in {RESERVED_PORTS}")


def start_listening(
    command: Callable[[int], list[str]],
    *,
    tries: int = 3,
    timeout: float = 30.0,
    host: str = "127.0.0.1",
    **popen: Any,
) -> tuple[subprocess.Popen[Any], int]:
    """Start `command(port)` on a free port of `host` and wait until it listens there. A
    free port can be taken by another test's process before ours binds it: ours then
    exits, and it is started again on another port (`tries` times)."""
    for _ in range(tries):
        port = free_port(host)
        process = subprocess.Popen(command(port), **popen)
        deadline = time.monotonic() + timeout
        while process.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection((host, port), timeout=1).close()
            except OSError:
                time.sleep(0.1)
                continue
            if process.poll() is None:  # it listens, and it is ours that does
                return process, port
        if process.poll() is None:
            stop_process(process)
            raise TimeoutError(f"{command(port)[:4]} did not listen on {port} in {timeout:.0f}s")
    raise RuntimeError(f"{command(0)[:4]} exited {tries} times before listening")


def wait_until(
    ready: Callable[[], bool],
    *,
    timeout: float,
    what: str,
    process: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
) -> None:
    """Poll `ready()` until it is true; fail early if `process` exits, late after `timeout`."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        try:
            if ready():
                return
        except Exception:  # any failure just means "not ready yet"
            pass
        if process is not None and process.poll() is not None:
            raise RuntimeError(
                f"{what} exited with code {process.returncode} before it was ready{log_tail(log)}"
            )
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} was not ready within {timeout:.0f}s{log_tail(log)}")
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def log_tail(log: Path | None, lines: int = 30) -> str:
    if log is None or not log.exists():
        return ""
    text = log.read_text(errors="replace").strip().splitlines()[-lines:]
    return ("\n--- " + log.name + " ---\n" + "\n".join(text)) if text else ""


def stop_process(process: subprocess.Popen[Any], timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `timeout`; only the process this module started."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout)


@contextlib.contextmanager
def serving(server: socketserver.BaseServer) -> Iterator[None]:
    """`server` answering on a daemon thread until the block ends, then closed. A short
    poll interval: shutdown() waits for the loop to look (0.5 s by default, paid by every
    test that starts one of these servers)."""
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
