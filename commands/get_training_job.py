"""get_training_job: a job's status, progress and metrics; optionally follow it."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Annotated

from pydantic import Field

from commands._cli import main_for
from skills.shared.progress import Progress
from skills.shared.tooling import WaitSeconds, tool
from skills.training_job_deployer.job_spec import DNS1123_LABEL, JobName
from skills.training_job_deployer.loss_curve import curves_of
from skills.training_job_deployer.models import JobState
from skills.training_job_deployer.plot import plot_png
from skills.training_job_deployer.targets.base import Target
from skills.training_job_deployer.targets.by_name import TargetSettings, get_target
from skills.training_job_deployer.trainer_log import parse_events

# The log lines a chart reads per job at most (its step lines are in there; a longer
# log's chart shows its latest part).
PLOT_LOG_LINES = 20_000
COMPARE_MAX = 5


@tool(read_only=True, idempotent=True, long=True)
def get_training_job(
    *,
    job_name: JobName,
    target: TargetSettings,
    wait_seconds: WaitSeconds = 0,
    plot: Annotated[bool, Field(strict=True, description="Add a PNG of the curves")] = False,
    compare: Annotated[
        list[Annotated[str, Field(pattern=DNS1123_LABEL, max_length=63)]] | None,
        Field(max_length=COMPARE_MAX, description="More jobs on the plot"),
    ] = None,
    progress: Progress | None = None,
) -> JobState:
    """Report a training job's status: steps done, first and last loss, tokens/s.

    wait_seconds > 0 follows the job (streaming progress) until it ends or the
    time passes. A failed job carries the trainer's error line and the log tail.
    """
    runner = get_target(target)
    state = runner.follow(job_name, progress, wait_seconds)
    if plot or compare:
        names = [job_name, *(compare or [])]
        state.attach_image(f"{job_name}.loss.png", loss_chart(runner, names))
    return state


def loss_chart(runner: Target, job_names: list[str]) -> bytes:
    """One PNG of the jobs' curves, from their logs' step lines (plot.py)."""
    curves = [
        curves_of(name, parse_events(runner.logs(name, PLOT_LOG_LINES)))
        for name in dict.fromkeys(job_names)
    ]
    return plot_png(curves)


main = main_for(get_training_job)


if __name__ == "__main__":
    main()
