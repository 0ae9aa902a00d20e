"""What test services hand out to processes that bind later (a pod's port, a Slurm
cluster's job ids, hence its rendezvous ports) is claimed machine-wide: a second copy
of the suite running at the same time is never handed the same, and no such port is
in Linux's ephemeral range, which any process's connection may take meanwhile."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.services import _common
from tests.services.slurm import JOB_ID_BLOCK, _first_job_id

ROOT = Path(__file__).resolve().parents[2]


def _ephemeral() -> range:
    low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    return range(low, high + 1)


def _in_another_process(code: str) -> subprocess.Popen[str]:
    """A second copy of the suite: claims `code`'s values, prints them, then holds its
    claims until its stdin closes."""
    head = "import json, sys\nfrom tests.services import _common, slurm\n"
    script = f"{head}{code}\nsys.stdin.read()"
    argv = [sys.executable, "-c", script]
    pipe = subprocess.PIPE
    return subprocess.Popen(argv, cwd=ROOT, text=True, stdin=pipe, stdout=pipe)


def test_reserved_ports_are_outside_the_ephemeral_range_and_free_now():
    ephemeral = _ephemeral()
    ports = [_common.reserved_port() for _ in range(50)]
    assert len(set(ports)) == 50
    assert not any(p in ephemeral for p in ports)
    assert all(20_000 > p >= 10_000 for p in ports)  # below the Slurm rendezvous ports


def test_a_second_copy_is_never_handed_a_port_or_job_block_this_one_holds():
    mine = {_common.reserved_port() for _ in range(300)}
    my_block = _first_job_id()
    other = _in_another_process(
        "print(json.dumps([_common.reserved_port() for _ in range(300)]), flush=True)\n"
        "print(slurm._first_job_id(), flush=True)"
    )
    try:
        assert other.stdout is not None
        theirs = set(json.loads(other.stdout.readline()))
        their_block = int(other.stdout.readline())
    finally:
        other.communicate("")
    assert not mine & theirs
    assert (my_block - 1) % JOB_ID_BLOCK == 0 and my_block != their_block
