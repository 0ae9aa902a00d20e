"""Process identity: a pid alone can be recycled and a record can be forged, so a process
we may signal is named by its pid, its start time and what it must be (our module's
command line for that job or operation, or a marker in its environment); all three
are checked before any signal. This is the one place processes are identified."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

import psutil

from skills.shared.files import open_for_append
from skills.shared.waiting import poll_until

# This project's root (a checkout or an install): a child started with `-m <module>`
# must import these tools, whatever its working directory.
PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
# Python's safe-path mode (3.11+): `python -m x` and `python script.py` put no folder of
# the user's (the working directory, the script's) before these tools' packages, so a
# project's own `trainer/` or `skills/` is never imported in their place. The variable is
# inherited by every child (torchrun's ranks); older Pythons ignore it, and lack the flag.
SAFE_PATH_ENV = {"PYTHONSAFEPATH": "1"}
SAFE_PATH_FLAGS: tuple[str, ...] = ("-P",) if sys.version_info >= (3, 11) else ()

# /proc start times are in clock ticks; psutil rounds to 10 ms. Equal within this.
_SAME_START_S = 0.05
# psutil adds /proc/stat's btime: whole seconds that the kernel derives from the wall clock
# on every read, so when NTP slews the clock across a second boundary it steps by one
# (every few days on a drifting VM). A start recorded before such a step reads exactly one
# second off after it, and a week-long job's supervisor must not turn "gone" then.
_BOOT_SECOND_STEPS = (0.0, 1.0)


def same_start(recorded: float, now_read: float) -> bool:
    """Whether two reads of a process's start time are the same start (up to a step of
    the boot time's whole second between the reads)."""
    off = abs(now_read - recorded)
    return any(abs(off - step) < _SAME_START_S for step in _BOOT_SECOND_STEPS)


@dataclass(frozen=True)
class Expected:
    """What our process at a pid must be: these words, in a row, on its command line
    (`-m <module> <id>`), and these values in its environment (inherited by children)."""

    command: tuple[str, ...] = ()
    environment: Mapping[str, str] = field(default_factory=dict)

    def matches(self, process: psutil.Process) -> bool:
        words = process.cmdline()
        n = len(self.command)
        if n and not any(tuple(words[i : i + n]) == self.command for i in range(len(words))):
            return False
        if self.environment:
            env = process.environ()
            return all(env.get(k) == v for k, v in self.environment.items())
        return True


def module_command(module: str, *args: str) -> Expected:
    """A process started by spawn_module(module, *args)."""
    return Expected(command=("-m", module, *args))


class Identity(Enum):
    OURS = "ours"  # that very process, and it is what the record says it is
    GONE = "gone"  # no process with that pid and start time (or a zombie)
    FOREIGN = "foreign"  # pid and start time match, but it is not our process


def identify(pid: int | None, started: float | None, expected: Expected) -> Identity:
    process = _running(pid, started)
    if process is None:
        return Identity.GONE
    try:
        ours = expected.matches(process)
    except psutil.NoSuchProcess:
        return Identity.GONE
    except (psutil.AccessDenied, psutil.ZombieProcess, OSError):
        ours = False  # another user's process, whatever it is, is not ours
    return Identity.OURS if ours else Identity.FOREIGN


def start_time(pid: int) -> float | None:
    """When the process started (seconds since the epoch); None if it does not exist."""
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None


def is_alive(pid: int | None, started: float | None) -> bool:
    """True while that very process (pid and start time) runs and is not a zombie."""
    return _running(pid, started) is not None


def _running(pid: int | None, started: float | None) -> psutil.Process | None:
    """That very process while it runs and is not a zombie (one read of its stat: a
    list looks at every running job's processes)."""
    if pid is None or started is None:
        return None
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            running = (
                same_start(started, process.create_time())
                and process.status() != psutil.STATUS_ZOMBIE
            )
    except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
        return None
    return process if running else None


def signal_group(
    pid: int | None, started: float | None, sig: signal.Signals, expected: Expected
) -> bool:
    """Signal the process group led by that very process, if it is ours (`expected`);
    False if it is gone or the pid belongs to another process."""
    if pid is None or identify(pid, started, expected) is not Identity.OURS:
        return False
    try:
        os.killpg(pid, sig)  # it leads its own session, so pgid == pid
    except ProcessLookupError:
        return False
    return True


def stop_group(
    pid: int | None,
    started: float | None,
    expected: Expected,
    grace_s: float,
    stopped: Callable[[], bool] | None = None,
    interval_s: float = 0.1,
) -> bool:
    """The one TERM, wait, KILL: SIGTERM the process group led by that very process (if
    ours), wait up to `grace_s` for `stopped` (default: the process gone), then SIGKILL
    it. False when there was nothing of ours to signal."""
    if not signal_group(pid, started, signal.SIGTERM, expected):
        return False
    done = stopped or (lambda: not is_alive(pid, started))
    if not poll_until(done, bool, grace_s, interval_s):
        signal_group(pid, started, signal.SIGKILL, expected)
    return True


def signal_marked(sig: signal.Signals, expected: Expected, root: int | None = None) -> int:
    """Signal every process that is `expected` (by its environment marker), plus the
    descendants of `root` (our own unreaped child), each with the group it leads. For
    a job whose launcher starts each worker in a session of its own (torchrun does), so
    that killing the launcher's group misses them, and an orphaned worker outlives it.
    Returns how many processes were signalled."""
    found: dict[int, psutil.Process] = {}
    if root is not None:
        with contextlib.suppress(psutil.Error):
            found.update((p.pid, p) for p in psutil.Process(root).children(recursive=True))
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if (
                process.pid not in found
                and process.pid != os.getpid()
                and expected.matches(process)
            ):
                found[process.pid] = process
    signalled = 0
    for pid in found:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(pid) == pid:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
            signalled += 1
    return signalled


def project_pythonpath() -> str:
    """PYTHONPATH with this project first, then whatever this process was given."""
    return os.pathsep.join(p for p in (PROJECT_ROOT, os.environ.get("PYTHONPATH", "")) if p)


def suite_env() -> dict[str, str]:
    """What a child that runs these tools' modules needs in its environment: this project
    first on the path, and safe-path mode, whatever folder it starts in."""
    return {"PYTHONPATH": project_pythonpath(), **SAFE_PATH_ENV}


def python_argv(module: str, *args: str) -> list[str]:
    """`python -P -m module args` with this interpreter: the module is these tools'."""
    return [sys.executable, *SAFE_PATH_FLAGS, "-m", module, *args]


def spawn_module(
    module: str,
    *args: str,
    log: Path,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
) -> int:
    """Start `python -m module args` detached: its own session (it outlives the caller,
    its terminal and its signals), output appended to `log`, `stdin` written to it,
    `env` added to this process's environment. Returns its pid. The log is opened by
    the no-link writer: a link or FIFO in its place is refused before anything starts."""
    env = {**os.environ, **(env or {}), **suite_env()}
    with open_for_append(log) as out:
        child = subprocess.Popen(
            python_argv(module, *args),
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
