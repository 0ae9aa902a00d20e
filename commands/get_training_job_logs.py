"""get_training_job_logs: the last lines of a training job's log."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Annotated

from pydantic import Field

from commands._cli import main_for
from skills.shared.progress import Progress
from skills.shared.tooling import tool
from skills.training_job_deployer.job_spec import JobName
from skills.training_job_deployer.models import JobLogs
from skills.training_job_deployer.targets.registry import TargetSettings, get_target


@tool(read_only=True, idempotent=True)
def get_training_job_logs(
    *,
    job_name: JobName,
    target: TargetSettings,
    tail_lines: Annotated[
        int, Field(ge=1, le=10_000, description="Lines from the end.")
    ] = 100,
    replica: Annotated[
        str | None,
        Field(pattern=r"^(master|worker)-\d{1,4}$", description="Cluster: e.g. worker-1."),
    ] = None,
    previous: Annotated[
        bool, Field(strict=True, description="Cluster: the restarted container's log.")
    ] = False,
    since_seconds: Annotated[
        int | None, Field(ge=1, le=10**7, description="Cluster: only the last N seconds.")
    ] = None,
    all_ranks: Annotated[
        bool, Field(strict=True, description="Cluster: every pod's last lines.")
    ] = False,
    progress: Progress | None = None,
) -> JobLogs:
    """Return the last lines of a training job's log (torchrun and every rank).

    On a cluster: rank 0's pod by default, one replica, or every pod's last lines;
    the size is bounded and a note says what was cut. Secret values from this
    environment (HF_TOKEN, AWS keys) are masked as ***.
    """
    runner = get_target(target)
    chosen = {"replica": replica, "previous": previous, "since_seconds": since_seconds,
              "all_ranks": all_ranks}  # fmt: skip
    options = {k: v for k, v in chosen.items() if v not in (None, False)}
    text = runner.logs(job_name, tail_lines, **options)
    return JobLogs(
        job_name=job_name,
        target=runner.name,
        log_path=runner.log_path(job_name),
        lines=len(text.splitlines()),
        text=text,
    )


main = main_for(get_training_job_logs)


if __name__ == "__main__":
    main()
