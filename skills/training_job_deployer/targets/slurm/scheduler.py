"""Slurm's client commands (sinfo, sbatch, scontrol, sacct, scancel), run here or, with
`ssh_host`, on that login node over ssh (argv quoted for its shell, stdin passed on);
their failures as the target's typed errors and their answers read as data."""

from __future__ import annotations

import os
import pwd
import re
import shlex
import shutil
import subprocess

from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.paths import working_dir
from skills.training_job_deployer.targets.slurm.record import SlurmEnd
from skills.training_job_deployer.targets.slurm.script import PartitionInfo

COMMAND_TIMEOUT_S = 60


class Scheduler:
    """Slurm's client commands, run here or, with `ssh_host`, on that host over ssh."""

    def __init__(self, ssh_host: str | None) -> None:
        self.ssh_host = ssh_host

    def argv(self, argv: list[str]) -> list[str]:
        if self.ssh_host is None:
            return argv
        # ssh hands the remote shell one string: each argument quoted for it.
        return ["ssh", "-o", "BatchMode=yes", "--", self.ssh_host, shlex.join(argv)]

    def run(
        self, argv: list[str], stdin: bytes | None = None, timeout: float = COMMAND_TIMEOUT_S
    ) -> subprocess.CompletedProcess[bytes]:
        full = self.argv(argv)
        if shutil.which(full[0]) is None:
            where = "" if self.ssh_host is None else f" (needed to reach {self.ssh_host})"
            raise ToolFailure(
                ErrorCode.SLURM_UNAVAILABLE,
                f"{full[0]} is not on PATH{where}.",
                "Run this on a Slurm login node (Slurm's clients installed), or set ssh_host "
                "to one."
                if self.ssh_host is None
                else "Install an OpenSSH client.",
                {"command": full[0]},
            )
        # Here, sbatch's directory is the job's: the caller's project (an MCP session's
        # workspace), never the server process's own directory.
        cwd = working_dir() if self.ssh_host is None else None
        try:
            done = subprocess.run(
                full, input=stdin, capture_output=True, timeout=timeout, check=False, cwd=cwd
            )
        except subprocess.TimeoutExpired:
            raise ToolFailure(
                ErrorCode.SLURM_UNAVAILABLE,
                f"{argv[0]} did not answer within {timeout:.0f} s.",
                "Check that slurmctld is up (sinfo) and reachable from here.",
                {"command": argv[0]},
            ) from None
        if self.ssh_host is not None and done.returncode == 255:
            raise ToolFailure(
                ErrorCode.ENDPOINT_UNREACHABLE,
                f"ssh to {self.ssh_host} failed: {_text(done.stderr)}",
                "Check that `ssh <ssh_host>` works without a password prompt (keys, ssh_config).",
                {"ssh_host": self.ssh_host},
            )
        return done

    def check(self, argv: list[str], stdin: bytes | None = None) -> str:
        """stdout of a command that must succeed; a failure carries Slurm's message."""
        done = self.run(argv, stdin)
        if done.returncode != 0:
            raise _slurm_failure(argv, done)
        return done.stdout.decode(errors="replace")

    def partition(self, wanted: str | None) -> PartitionInfo:
        """The partition named `wanted` (None: the default one), as its nodes are now."""
        out = self.check(["sinfo", "--noheader", "--format=%P|%c|%G|%f|%D"])
        rows: dict[str, list[tuple[str, str, str, str]]] = {}
        default = None
        for line in out.splitlines():
            parts = line.strip().split("|")
            if len(parts) != 5:
                continue
            name = parts[0].rstrip("*")
            if parts[0].endswith("*"):
                default = name
            rows.setdefault(name, []).append((parts[1], parts[2], parts[3], parts[4]))
        wanted = wanted or default
        if wanted is None or wanted not in rows:
            known = ", ".join(sorted(rows)) or "none"
            said = (
                "no default partition"
                if wanted is None
                else _text(self.run(["scontrol", "show", "partition", wanted]).stdout)
                or f"partition {wanted} not found"
            )
            raise ToolFailure(
                ErrorCode.NOT_FOUND,
                f"Slurm: {said}.",
                f"Pick one of the cluster's partitions: {known}.",
                {"partitions": sorted(rows)},
            )
        return PartitionInfo.from_sinfo(wanted, rows[wanted])

    def submit(self, script: str) -> int:
        """`sbatch --parsable` with the script on stdin: the new job's id."""
        out = self.check(["sbatch", "--parsable"], stdin=script.encode())
        job_id = out.strip().split(";")[0]
        if not job_id.isdigit():
            raise ToolFailure(
                ErrorCode.SLURM_REJECTED,
                f"sbatch answered {out.strip()[:200]!r}, not a job id.",
                "Look at the cluster's sbatch (a wrapper?) and call again.",
            )
        return int(job_id)

    def job_state(self, slurm_job_id: int) -> SlurmEnd | None:
        """The job's state now (None: the scheduler no longer knows it)."""
        job = str(slurm_job_id)
        done = self.run(["scontrol", "show", "job", "-o", job])
        if done.returncode == 0:
            fields = _fields(done.stdout.decode(errors="replace").strip())
            state = fields.get("JobState", "")
            if re.fullmatch(r"[A-Z_]{1,32}", state):
                reason = fields.get("Reason")
                return SlurmEnd(
                    state=state,
                    exit_code=_exit_code(fields.get("ExitCode")),
                    restarts=int(fields.get("Restarts", "0") or 0),
                    reason=None if reason in (None, "None", "(null)") else reason[:200],
                )
        elif b"Invalid job id" not in done.stderr:
            raise _slurm_failure(["scontrol"], done)
        # Gone from the controller (MinJobAge): accounting, where the cluster has it.
        acct = self.run(
            ["sacct", "--noheader", "--parsable2", "-X", "-j", job, "--format=State,ExitCode"]
        )
        line = acct.stdout.decode(errors="replace").strip().splitlines()
        if acct.returncode == 0 and line and "|" in line[0]:
            state, code = line[0].split("|", 1)
            state = state.split()[0] if state else ""
            if re.fullmatch(r"[A-Z_]{1,32}", state):
                return SlurmEnd(state=state, exit_code=_exit_code(code))
        return None

    def job_owner(self, slurm_job_id: int) -> tuple[str, str] | None:
        """(job name, user) of a job the controller knows; None: it no longer does."""
        done = self.run(["scontrol", "show", "job", "-o", str(slurm_job_id)])
        if done.returncode != 0:
            return None
        fields = _fields(done.stdout.decode(errors="replace").strip())
        return fields.get("JobName", ""), fields.get("UserId", "").split("(")[0]

    def user(self) -> str:
        """The user Slurm commands run as: this one, or ssh_host's login."""
        if self.ssh_host is None:
            return pwd.getpwuid(os.getuid()).pw_name
        return self.check(["id", "-un"]).strip()


def _text(data: bytes) -> str:
    return " ".join(data.decode(errors="replace").split())[:500]


def _slurm_failure(argv: list[str], done: subprocess.CompletedProcess[bytes]) -> ToolFailure:
    said = _text(done.stderr) or _text(done.stdout) or f"exit status {done.returncode}"
    if "Unable to contact slurm controller" in said or "Could not establish" in said:
        return ToolFailure(
            ErrorCode.SLURM_UNAVAILABLE,
            f"{argv[0]}: {said}",
            "Check that slurmctld runs and SLURM_CONF (or the login node's setup) points "
            "at it: `sinfo` should list partitions.",
            {"command": argv[0]},
        )
    return ToolFailure(
        ErrorCode.SLURM_REJECTED,
        f"{argv[0]} refused: {said}",
        "Fix what Slurm names (partition, account, time limit, GPUs) and call again; "
        "`sinfo` lists partitions and their limits.",
        {"command": argv[0]},
    )


def _fields(line: str) -> dict[str, str]:
    """`Key=Value` pairs of one `scontrol -o` line (values with spaces are cut)."""
    return dict(re.findall(r"(?:^|\s)([A-Za-z]+)=(\S*)", line))


def _exit_code(value: str | None) -> int | None:
    """Slurm's `exit:signal` as one number (128 + signal when a signal ended it)."""
    if not value or ":" not in value:
        return None
    code, sig = value.split(":", 1)
    try:
        return 128 + int(sig) if int(sig) else int(code)
    except ValueError:
        return None
