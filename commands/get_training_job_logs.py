"""get_training_job_logs: the last lines of a training job's log."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Annotated

from pydantic import Field

from skills.shared.cli import main_for
from skills.shared.progress import Progress
from skills.shared.tooling import tool
from skills.training_job_deployer.job_spec import JobName
from skills.training_job_deployer.models import JobLogs
from skills.training_job_deployer.targets import TargetSettings, get_target


@tool(read_only=True, idempotent=True)
def get_training_job_logs(
    *,
    job_name: JobName,
    target: TargetSettings,
    tail_lines: Annotated[
        int, Field(ge=1, le=10_000, description="How many lines from the end to return.")
    ] = 100,
    progress: Progress | None = None,
) -> JobLogs:
    """Return the last lines of a training job's log (torchrun and every rank).

    Secret values from this environment (HF_TOKEN, AWS keys) are masked as ***.
    """
    runner = get_target(target)
    text = runner.logs(job_name, tail_lines)
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
