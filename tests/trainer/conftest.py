"""Helpers for the trainer tests: run the trainer as a user would and parse its lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
