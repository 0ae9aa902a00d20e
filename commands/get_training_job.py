"""get_training_job: a job's status, progress and metrics; optionally follow it."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from commands._cli import main_for
from skills.shared.progress import Progress
from skills.shared.tooling import WaitSeconds, tool
from skills.training_job_deployer.job_spec import JobName
from skills.training_job_deployer.models import JobState
from skills.training_job_deployer.targets.registry import TargetSettings, get_target


@tool(read_only=True, idempotent=True, long=True)
def get_training_job(
    *,
    job_name: JobName,
    target: TargetSettings,
    wait_seconds: WaitSeconds = 0,
    progress: Progress | None = None,
) -> JobState:
    """Report a training job's status: steps done, first and last loss, tokens/s.

    wait_seconds > 0 follows the job (streaming progress) until it ends or the
    time passes. A failed job carries the trainer's error line and the log tail.
    """
    return get_target(target).follow(job_name, progress, wait_seconds)


main = main_for(get_training_job)


if __name__ == "__main__":
    main()
