"""signal_group signals only our very process (psutil identity: pid, start time, command
line, environment), and its whole group; anything else is left running. Real processes:
a sleeper in its own session, with a child in its group."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psutil
import pytest

from skills.operations import processes
from skills.operations.processes import Expected, Identity

# The leader starts a child in its own group, prints its pid, and sleeps.
LEADER = (
    "import subprocess, sys, time;"
    "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']);"
    "print(c.pid, flush=True); time.sleep(120)"
)


@dataclass
class Sleeper:
    pid: int
    started: float
    child: int
    marker: str
    popen: subprocess.Popen


@pytest.fixture
def sleeper() -> Iterator[Sleeper]:
    marker = f"tests36-{uuid.uuid4().hex}"
    popen = subprocess.Popen(
        [sys.executable, "-c", LEADER, marker],
        stdout=subprocess.PIPE,
        env={**os.environ, "TEST_MARKER": marker},
        start_new_session=True,
    )
    assert popen.stdout is not None
    child = int(popen.stdout.readline())
    started = processes.start_time(popen.pid)
    assert started is not None
    yield Sleeper(popen.pid, started, child, marker, popen)
    for pid in (popen.pid, child):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    popen.wait(10)


def gone(pid: int, timeout: float = 10) -> bool:
    """True once pid is gone or a zombie (its parent has not reaped it yet)."""
    try:
        psutil.Process(pid).wait(timeout)
    except psutil.NoSuchProcess:
        return True
    except psutil.TimeoutExpired:
        return False
    return True


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_our_process_and_its_group_are_signalled(sleeper):
    expected = Expected(command=(sleeper.marker,), environment={"TEST_MARKER": sleeper.marker})
    assert processes.identify(sleeper.pid, sleeper.started, expected) is Identity.OURS
    assert processes.signal_group(sleeper.pid, sleeper.started, signal.SIGTERM, expected)
    assert sleeper.popen.wait(10) == -signal.SIGTERM
    assert gone(sleeper.child)  # the group, not only its leader


# A process that is not ours, each way a record can be wrong: (identity, how it is named).
NOT_OURS = {
    "another command line": (Identity.FOREIGN, lambda s: (s.started, Expected(command=("x",)))),
    "another environment": (
        Identity.FOREIGN,
        lambda s: (s.started, Expected(command=(s.marker,), environment={"TEST_MARKER": "x"})),
    ),
    "a recycled pid (another start time)": (
        Identity.GONE,
        lambda s: (s.started - 5, Expected(command=(s.marker,))),
    ),
    "no start time recorded": (Identity.GONE, lambda s: (None, Expected(command=(s.marker,)))),
    "a recycled pid started half a second later": (
        Identity.GONE,
        lambda s: (s.started - 0.5, Expected(command=(s.marker,))),
    ),
    "a recycled pid started two seconds later": (
        Identity.GONE,
        lambda s: (s.started - 2.0, Expected(command=(s.marker,))),
    ),
}


@pytest.mark.parametrize("step", [1.0, -1.0])
def test_a_start_read_across_a_step_of_the_boot_second_is_the_same_process(sleeper, step):
    """psutil's start time is /proc/stat's btime (whole seconds, recomputed from the wall
    clock, so NTP slewing steps it by one now and then) plus the process's ticks: a start
    recorded before such a step reads one second off after it. Still that very process."""
    expected = Expected(command=(sleeper.marker,))
    recorded = sleeper.started + step
    assert processes.is_alive(sleeper.pid, recorded)
    assert processes.identify(sleeper.pid, recorded, expected) is Identity.OURS


@pytest.mark.parametrize("case", sorted(NOT_OURS))
def test_a_process_that_is_not_ours_is_never_signalled(sleeper, case):
    identity, named = NOT_OURS[case]
    started, expected = named(sleeper)
    assert processes.identify(sleeper.pid, started, expected) is identity
    assert not processes.signal_group(sleeper.pid, started, signal.SIGTERM, expected)
    time.sleep(0.2)  # a signal sent would have landed by now
    assert running(sleeper.pid) and running(sleeper.child)


def test_a_pid_that_is_gone_is_not_signalled(sleeper):
    expected = Expected(command=(sleeper.marker,))
    sleeper.popen.kill()
    sleeper.popen.wait(10)
    assert processes.identify(sleeper.pid, sleeper.started, expected) is Identity.GONE
    assert not processes.signal_group(sleeper.pid, sleeper.started, signal.SIGTERM, expected)
    assert not processes.signal_group(None, sleeper.started, signal.SIGTERM, expected)
    assert running(sleeper.child)  # its orphaned child was never ours to signal by that pid
