"""How a benchmark starts its torch processes (the trainer, the bare loop)."""

from __future__ import annotations

import contextlib
import io
import os
import runpy
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path


def launcher(nproc: int, quick: bool = False) -> list[str]:
    """The command before a script or `-m module` that runs it on `nproc` processes:
    torchrun; a quick run's single process, python alone (the trainer and the bare loop
    run a world of one with no launcher, the same FSDP code path, and torchrun's own
    torch start, most of such a launch, is saved)."""
    if quick and nproc == 1:
        return [sys.executable]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={nproc}"]  # fmt: skip


def launch(
    nproc: int, quick: bool, args: list[str], env: Mapping[str, str], cwd: Path
) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `args` (a script or `-m module` and its arguments)
    on `nproc` processes, launched as `launcher` says. A quick run's single process runs
    in this one instead (`run_here`): the trainer's and the bare loop's mains run a world
    of one in-process as well (the trainer tests' train_here), and each python that
    imports torch and the trainer is seconds of CPU, most of a quick launch."""
    if quick and nproc == 1:
        return run_here(args, env, cwd)
    done = subprocess.run([*launcher(nproc, quick), *args], cwd=cwd, env=dict(env),
                          capture_output=True, text=True, check=False)  # fmt: skip
    return done.returncode, done.stdout, done.stderr


def run_here(args: list[str], env: Mapping[str, str], cwd: Path) -> tuple[int, str, str]:
    """`python ARGS` in this process: its argv, environment and working directory for the
    run, its stdout captured (stderr is this process's own, so it reads "")."""
    out = io.StringIO()
    code: int | str | None = 0
    with _as_process(args, env, cwd), contextlib.redirect_stdout(out):
        try:
            if args[0] == "-m":
                runpy.run_module(args[1], run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(args[0], run_name="__main__")
        except SystemExit as exc:  # the mains end with sys.exit(code)
            code = exc.code
    if not isinstance(code, int):  # sys.exit("message") or sys.exit(None)
        print(code or "", file=sys.stderr)
        code = 0 if code is None else 1
    return code, out.getvalue(), ""


@contextlib.contextmanager
def _as_process(args: list[str], env: Mapping[str, str], cwd: Path) -> Iterator[None]:
    argv, environ, here = sys.argv, dict(os.environ), Path.cwd()
    sys.argv = [args[1], *args[2:]] if args[0] == "-m" else list(args)
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    try:
        yield
    finally:
        os.chdir(here)
        os.environ.clear()
        os.environ.update(environ)
        sys.argv = argv
