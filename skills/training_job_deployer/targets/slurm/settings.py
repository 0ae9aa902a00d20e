"""The Slurm target's settings: where the jobs go (runs_dir, ssh_host) and, to deploy,
how sbatch is asked (partition, account, time limit, venv or container image)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from skills.training_job_deployer.targets.base import TargetSettings
from skills.training_job_deployer.targets.run_dir import RunsDir
from skills.training_job_deployer.targets.slurm.script import SBATCH_PATH

SLURM_NAME = r"^[A-Za-z0-9_.-]{1,64}$"
# Slurm's time formats: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S.
SLURM_TIME = r"^(\d{1,7}(:\d{1,2}){0,2}|\d{1,4}-\d{1,2}(:\d{1,2}){0,2})$"
# An ssh destination ([user@]host or an ssh_config alias); never an option.
SSH_HOST = r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,253}$"


def _matching(pattern: str, rule: str) -> AfterValidator:
    """A pattern checked by validation but kept out of the tools' schemas (every job
    tool carries these fields); the error says the rule in words."""

    def check(value: str | None) -> str | None:
        if value is not None and not re.fullmatch(pattern, value):
            raise ValueError(rule)
        return value

    return AfterValidator(check)


class SlurmSettings(TargetSettings):
    """sbatch + srun torchrun"""

    target: Literal["slurm"]
    runs_dir: Annotated[
        RunsDir,
        _matching(r"(~/)?" + SBATCH_PATH.strip("^"), "on Slurm: letters, digits, _ . / + = @ -"),
    ] = "runs"
    ssh_host: Annotated[
        str | None,
        Field(description="Slurm: login node to ssh to."),
        _matching(SSH_HOST, "[user@]host or an ssh_config alias"),
    ] = None

    @property
    def job_runs_here(self) -> bool:
        # Without ssh this host is a login node sharing the cluster's filesystem.
        return self.ssh_host is None


class SlurmDeploySettings(SlurmSettings):
    """sbatch + srun torchrun"""

    partition: Annotated[
        str | None,
        Field(description="Slurm partition (default: the default one)."),
        _matching(SLURM_NAME, "letters, digits, _ . - (at most 64)"),
    ] = None
    account: Annotated[
        str | None,
        Field(description="Slurm account to charge."),
        _matching(SLURM_NAME, "letters, digits, _ . - (at most 64)"),
    ] = None
    time_limit: Annotated[
        str | None,
        Field(description="Slurm time limit, e.g. 24:00:00 or 2-00:00:00."),
        _matching(SLURM_TIME, "Slurm's time format: M, M:S, H:M:S, D-H, D-H:M or D-H:M:S"),
    ] = None
    venv: Annotated[
        str | None,
        Field(max_length=4096, description="Slurm: venv on the nodes, for its bin/python."),
        _matching(r"[^-\s\x00-\x1f\x7f][^\x00-\x1f\x7f]*", "a path, not an option"),
    ] = None
    container_image: Annotated[
        str | None,
        Field(max_length=512, description="Slurm: container image (pyxis)."),
        _matching(r"[A-Za-z0-9][A-Za-z0-9._/:@+#-]*", "an image reference"),
    ] = None
