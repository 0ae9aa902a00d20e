"""Process identity: a pid alone can be recycled, so a process we may signal is named
by its pid and its start time, and both are checked before any signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

# This project's root (a checkout or an install): a child started with `-m <module>`
# must import these tools, whatever its working directory.
PROJECT_ROOT = str(Path(__file__).resolve().parents[2])

# /proc start times are in clock ticks; psutil rounds to 10 ms. Equal within this.
_SAME_START_S = 0.05


def start_time(pid: int) -> float | None:
    """When the process started (seconds since the epoch); None if it does not exist."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def is_alive(pid: int | None, started: float | None) -> bool:
    """True while that very process (pid and start time) runs and is not a zombie."""
    if pid is None or started is None:
        return False
    try:
        process = psutil.Process(pid)
        return (
            abs(process.create_time() - started) < _SAME_START_S
            and process.status() != psutil.STATUS_ZOMBIE
        )
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return False


def signal_group(pid: int | None, started: float | None, sig: signal.Signals) -> bool:
    """Signal the process group led by that very process; False if it is gone or
    the pid now belongs to another process."""
    if pid is None or not is_alive(pid, started):
        return False
    try:
        os.killpg(pid, sig)  # it leads its own session, so pgid == pid
    except ProcessLookupError:
        return False
    return True


def project_pythonpath() -> str:
    """PYTHONPATH with this project first, then whatever this process was given."""
    return os.pathsep.join(p for p in (PROJECT_ROOT, os.environ.get("PYTHONPATH", "")) if p)


def spawn_module(module: str, *args: str, log: Path, stdin: bytes | None = None) -> int:
    """Start `python -m module args` detached: its own session (it outlives the caller,
    its terminal and its signals), output appended to `log`, `stdin` written to it.
    Returns its pid."""
    env = {**os.environ, "PYTHONPATH": project_pythonpath()}
    with open(log, "ab") as out:
        child = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            env=env,
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    if stdin is not None:
        assert child.stdin is not None
        child.stdin.write(stdin)
        child.stdin.close()
    return child.pid
