"""A real one-node Slurm cluster (Debian `slurm-wlm` + `munge`) with every path private.

    with slurm_cluster() as cluster:
        cluster.env        # {"SLURM_CONF": ...}: clients (sbatch, scontrol) find it
        cluster.partition  # "debug", the node's only partition (the default)

munged, slurmctld and slurmd run as this user (root on the test machines) with their
key, sockets, state, spool, pid and log files in a temp dir, free ports and a random
first job id (see _first_job_id); no file in /etc is read or written. Stopped by their
pid files (only the daemons started here).
No accounting daemon: `sacct` says accounting is disabled; `scontrol show job` keeps an
ended job for MinJobAge seconds.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import secrets
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ._common import claim, find_binary, free_port, log_tail, wait_until

APT_PACKAGES = "slurm-wlm munge"
PARTITION = "debug"
SHORT_PARTITION = "short"
NODE_CPUS = 2
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "scontrol", "sinfo", "scancel", "squeue")


def check() -> dict[str, str]:
    """The daemons and clients this cluster needs, or MissingBinary with the apt hint."""
    return {name: find_binary(name, apt=APT_PACKAGES) for name in DAEMONS + CLIENTS}


@dataclass
class SlurmCluster:
    root: Path
    conf: Path
    partition: str = PARTITION
    env: dict[str, str] = field(default_factory=dict)

    def scontrol(self, *args: str) -> str:
        done = subprocess.run(
            ["scontrol", *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return done.stdout

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job -o ID` as a dict (JobState, Restarts, ...)."""
        line = self.scontrol("show", "job", "-o", job_id).strip()
        return dict(part.split("=", 1) for part in line.split() if "=" in part)


# The batch script's rendezvous port is 20000 + job id % 10000, so two clusters on one host
# (parallel test sessions) that both numbered jobs from 1 would bind the same ports: each
# cluster claims its own block of 500 job ids (a session submits tens of jobs), which
# no other session on the machine holds while it runs.
JOB_ID_BLOCK = 500


def _first_job_id() -> int:
    return 1 + JOB_ID_BLOCK * claim("slurm-job-ids", range(10_000 // JOB_ID_BLOCK))


def _slurm_conf(root: Path, ctld_port: int, slurmd_port: int, user: str) -> str:
    return "\n".join(
        [
            "ClusterName=fsdp-test",
            f"FirstJobId={_first_job_id()}",
            "SlurmctldHost=localhost",
            f"SlurmUser={user}",
            f"SlurmdUser={user}",
            f"SlurmctldPort={ctld_port}",
            f"SlurmdPort={slurmd_port}",
            "AuthType=auth/munge",
            f"AuthInfo=socket={root}/munge.socket",
            "CredType=cred/munge",
            f"StateSaveLocation={root}/state",
            f"SlurmdSpoolDir={root}/spool",
            f"SlurmctldPidFile={root}/slurmctld.pid",
            f"SlurmdPidFile={root}/slurmd.pid",
            f"SlurmctldLogFile={root}/slurmctld.log",
            f"SlurmdLogFile={root}/slurmd.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "JobAcctGatherType=jobacct_gather/none",
            "ReturnToService=2",
            # Quick turnarounds for tests; SIGKILL 10 s after SIGTERM (the trainer
            # checkpoints well within it).
            "SchedulerParameters=sched_interval=1",
            "KillWait=10",
            f"NodeName=localhost CPUs={NODE_CPUS} RealMemory=4000 State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
            # A partition whose limit sbatch enforces: a longer time_limit is refused.
            f"PartitionName={SHORT_PARTITION} Nodes=localhost MaxTime=1 State=UP",
            "EnforcePartLimits=ALL",
            "",
        ]
    )


def _stop_by_pid_file(pid_file: Path, timeout: float = 10.0) -> None:
    """SIGTERM the daemon named in its pid file, SIGKILL after `timeout`."""
    try:
        daemon = psutil.Process(int(pid_file.read_text().strip()))
    except (FileNotFoundError, ValueError, psutil.NoSuchProcess):
        return
    with contextlib.suppress(psutil.NoSuchProcess):
        daemon.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _running(daemon):
                return
            time.sleep(0.05)
        daemon.send_signal(signal.SIGKILL)


def _running(daemon: psutil.Process) -> bool:
    """Not gone and not a zombie. The daemons are init's children (they detach): a zombie
    has exited, and only init has yet to reap it, which takes up to 2 s on some
    machines (it did for each of the three here: 5.5 s a stop, issue 36)."""
    try:
        return daemon.is_running() and daemon.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _cancel_all(env: dict[str, str], user: str, timeout: float = 30.0) -> None:
    """scancel every job of this cluster (all are this user's) and wait until none is left."""
    run_env = {**os.environ, **env}
    subprocess.run(["scancel", f"--user={user}"], env=run_env, capture_output=True, timeout=30)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = subprocess.run(
            ["squeue", "--noheader", "--format=%i"],
            env=run_env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        if left.returncode != 0 or not left.stdout.strip():
            return
        time.sleep(0.5)


def _node_idle(env: dict[str, str]) -> bool:
    done = subprocess.run(
        ["sinfo", "--noheader", "--format=%t"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=10,
    )
    states = done.stdout.split()
    return done.returncode == 0 and bool(states) and all(s == "idle" for s in states)


@contextlib.contextmanager
def slurm_cluster(timeout: float = 30.0) -> Iterator[SlurmCluster]:
    """munged, slurmctld and slurmd on loopback until the block exits."""
    binaries = check()
    user = getpass.getuser()
    with tempfile.TemporaryDirectory(prefix="fsdp-slurm-") as tmp:
        root = Path(tmp)
        for sub in ("state", "spool"):
            (root / sub).mkdir()
        key = root / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        pid_files = [root / "munged.pid"]
        try:
            env = _start(binaries, root, key, user, pid_files)
            wait_until(
                lambda: _node_idle(env),
                timeout=timeout,
                what="the Slurm node",
                log=root / "slurmctld.log",
            )
            yield SlurmCluster(root=root, conf=Path(env["SLURM_CONF"]), env=env)
            _cancel_all(env, user)  # no job step may outlive its slurmd
        finally:
            for pid_file in reversed(pid_files):
                _stop_by_pid_file(pid_file)


def _start(
    binaries: dict[str, str], root: Path, key: Path, user: str, pid_files: list[Path]
) -> dict[str, str]:
    subprocess.run(
        [
            binaries["munged"],
            f"--key-file={key}",
            f"--socket={root}/munge.socket",
            f"--pid-file={root}/munged.pid",
            f"--log-file={root}/munged.log",
            f"--seed-file={root}/munged.seed",
            "--force",
        ],
        check=True,
        capture_output=True,
        timeout=30,
    )
    conf = root / "slurm.conf"
    conf.write_text(_slurm_conf(root, free_port(), free_port(), user))
    env = {"SLURM_CONF": str(conf)}
    for daemon, args in (("slurmctld", ["-c"]), ("slurmd", [])):
        pid_files.append(root / f"{daemon}.pid")
        done = subprocess.run(
            [binaries[daemon], *args],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=30,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"{daemon} exited with {done.returncode}: {done.stderr.strip()}"
                f"{log_tail(root / f'{daemon}.log')}"
            )
    return env
