"""list_training_jobs: the training jobs a target knows, newest first."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Annotated, Any

from pydantic import Field

from commands._cli import main_for
from skills.shared.paging import Cursor, Paged
from skills.shared.progress import Progress
from skills.shared.results import without_unset
from skills.shared.tooling import tool
from skills.training_job_deployer.models import JobState, JobStatus
from skills.training_job_deployer.targets.base import JobPage
from skills.training_job_deployer.targets.by_name import TargetSettings, get_target

# What a listed job leaves out over MCP (a failed job's log tail, its pods, next step).
LISTED_JOB_DETAIL = {"log_tail", "pods", "conditions", "error", "next_step", "hint", "warnings"}


class JobList(Paged):
    entry_name = "job_name"
    jobs: list[JobState]

    def left_out_over_mcp(self) -> dict[str, Any]:
        # A list says which jobs and how they stand; get_training_job gives one in full.
        return {"jobs": {"__all__": LISTED_JOB_DETAIL}}

    def compact(self, data: dict[str, Any]) -> dict[str, Any]:
        return {**data, "jobs": without_unset(data["jobs"])}

    def summary_rows(self) -> list[tuple[str, Any]]:
        rows: list[tuple[str, Any]] = [
            (job.job_name, f"{job.status} {job.steps}/{job.max_steps or '?'} steps")
            for job in self.jobs
        ] or [("jobs", "none")]
        return rows + self.page_rows()


@tool(read_only=True, idempotent=True)
def list_training_jobs(
    *,
    target: TargetSettings,
    status: Annotated[JobStatus | None, Field(description="Only these.")] = None,
    limit: Annotated[int, Field(ge=1, le=200, description="At most this many.")] = 20,
    cursor: Cursor = None,
    progress: Progress | None = None,
) -> JobList:
    """List the training jobs a target knows, newest first, with status and steps."""
    page = get_target(target).list_jobs(JobPage(limit, cursor, status))
    return JobList.page(page.last, page.more, jobs=page.items)


main = main_for(list_training_jobs)


if __name__ == "__main__":
    main()
