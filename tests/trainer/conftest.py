"""Helpers for the trainer tests: run the trainer as a user would and parse its lines."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
import traceback
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


def _as_caller(env: dict[str, str], cwd: str) -> None:
    # A forked rank has the fork server's environment and directory: take the caller's.
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)


def _rank_in(rank: int, fn: Callable[..., None], env: dict[str, str], cwd: str, *args) -> None:
    _as_caller(env, cwd)
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


def _rank_main(args: list[str], env: dict[str, str], cwd: str, out: str) -> None:
    # A forked rank: the caller's environment and directory, stdout/stderr to its files
    # (fd level, as a launcher's pipes would be), exit status = main's return value.
    _as_caller(env, cwd)
    for fd, suffix in ((1, "out"), (2, "err")):
        with open(f"{out}.{suffix}", "w") as f:
            os.dup2(f.fileno(), fd)
    code = 1
    try:
        from trainer import train as train_mod

        code = train_mod.main(args)
    except BaseException:  # noqa: BLE001 (the rank's status, its traceback on stderr)
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def launch(
    args: list[str],
    nproc: int,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess:
    """`torchrun --standalone --nproc_per_node=NPROC -m trainer ARGS` less torchrun's
    python and each rank's torch import (~10 CPU-s a 2-rank run): the ranks, processes
    of their own, are forked from fork_server() with the environment torchrun gives its
    workers (RANK, LOCAL_RANK, WORLD_SIZE, ..., its agent store, here a TCPStore this
    process hosts) and run the trainer's main. Torchrun's own part (restarts, forwarding
    SIGTERM, its exit status) is test_checkpoint_resume's torchrun tests. stdout is rank
    0's lines then the others', stderr every rank's; returncode the first failing rank's."""
    import tempfile

    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, nproc, is_master=True, wait_for_workers=False)
    base = {**(env or trainer_env()), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port),
            "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": "0",
            "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_RUN_ID": "none"}  # fmt: skip
    if nproc > 1:
        base.setdefault("OMP_NUM_THREADS", "1")  # as torchrun sets it
    ctx = fork_server()
    with tempfile.TemporaryDirectory() as tmp:
        ranks = []
        for rank in range(nproc):
            rank_env = {**base, "RANK": str(rank), "LOCAL_RANK": str(rank), "ROLE_RANK": str(rank)}
            out = os.path.join(tmp, str(rank))
            proc = ctx.Process(target=_rank_main, args=(args, rank_env, str(cwd or ROOT), out))
            proc.start()
            ranks.append((proc, out))
        deadline = time.monotonic() + timeout
        for proc, _ in ranks:
            proc.join(max(0.0, deadline - time.monotonic()))
        hung = [proc for proc, _ in ranks if proc.exitcode is None]
        for proc in hung:  # a hung run fails the test, not the CI job
            proc.kill()
            proc.join()
        codes = [proc.exitcode for proc, _ in ranks]
        stdout = "".join(Path(f"{out}.out").read_text() for _, out in ranks)
        stderr = "".join(Path(f"{out}.err").read_text() for _, out in ranks)
    del store
    assert not hung, f"ranks still running after {timeout} s:\n{stderr[-3000:]}"
    code = next((c for c in codes if c != 0), 0)
    return subprocess.CompletedProcess(["trainer", *args], code, stdout, stderr)


def _run_trainer(
    args: list[str], nproc: int | None = None, cwd: Path | None = None, timeout: float = 240
) -> tuple[subprocess.CompletedProcess, list[dict]]:
    """`python -m trainer ARGS`, or `nproc` ranks as torchrun starts them (launch)."""
    if nproc is not None:
        proc = launch(args, nproc, cwd=cwd, timeout=timeout)
        return proc, parse_lines(proc.stdout)
    argv = [sys.executable, "-m", "trainer", *args]
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
