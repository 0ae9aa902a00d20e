"""Helpers for the trainer tests: run the trainer as a user would and parse its lines."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def trainer_env() -> dict[str, str]:
    # The repo root on the path, as an editable install would provide; no inherited
    # torchrun variables, so a plain `python -m trainer` really is a world of one.
    dist_vars = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR")
    env = {k: v for k, v in os.environ.items() if k not in dist_vars + ("MASTER_PORT",)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    return env


def parse_lines(stdout: str) -> list[dict]:
    """Every stdout line must be one JSON object with an event."""
    events = [json.loads(line) for line in stdout.splitlines()]
    assert all("event" in e for e in events), stdout
    return events


def train_here(capsys: pytest.CaptureFixture[str], args: list[str]) -> tuple[int, list[dict]]:
    """The trainer's main in this process, a world of one: what `python -m trainer ARGS`
    does, less the seconds of CPU a process of its own spends importing torch. Use it
    with the no_dist_env fixture; stdout must still be one JSON event a line."""
    from trainer import train as train_mod

    code = train_mod.main(args)
    return code, parse_lines(capsys.readouterr().out)


# What a rank of spawn() finds imported: torch and the distributed parts every rank uses
# (~4 of the ~5 CPU-s a spawned python spends before its first line of work).
SPAWN_PRELOAD = ["torch", "torch.distributed.fsdp", "torch.distributed.checkpoint"]


def _rank_in(rank: int, fn: Callable[..., None], env: dict[str, str], cwd: str, *args) -> None:
    # A forked rank has the fork server's environment and directory: take the caller's.
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    fn(rank, *args)


def fork_server() -> multiprocessing.context.ForkServerContext:
    """multiprocessing's forkserver context, its server (one a test process, started on
    first use) importing SPAWN_PRELOAD: its processes start with torch imported. They
    have the server's environment and directory, not the caller's of the moment."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(SPAWN_PRELOAD)  # once the server runs, this changes nothing
    return ctx


def spawn(fn: Callable[..., None], args: tuple, nprocs: int) -> None:
    """torch.multiprocessing.spawn(fn, args, nprocs), the ranks forked from a fork server
    that imported torch once for this test process, not each rank a python importing it
    again. Each rank still is a process of its own, with this process's environment."""
    import torch.multiprocessing as mp

    fork_server()
    mp.start_processes(_rank_in, args=(fn, dict(os.environ), os.getcwd(), *args),
                       nprocs=nprocs, join=True, start_method="forkserver")  # fmt: skip


def _run_trainer(
    args: list[str], nproc: int | None = None, cwd: Path | None = None, timeout: float = 240
) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """`python -m trainer ARGS`, or under torchrun with `nproc` processes."""
    if nproc is None:
        argv = [sys.executable, "-m", "trainer", *args]
    else:
        argv = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={nproc}",
            "-m",
            "trainer",
            *args,
        ]
    proc = subprocess.run(
        argv, cwd=cwd or ROOT, env=trainer_env(), capture_output=True, text=True, timeout=timeout
    )
    return proc, parse_lines(proc.stdout)


@pytest.fixture
def no_dist_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process runs: make sure no torchrun variables leak in."""
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="session")
def run_trainer():
    """The trainer as a subprocess: run_trainer(args, nproc=None) -> (proc, events)."""
    return _run_trainer
