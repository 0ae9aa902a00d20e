"""delete_training_job: delete a training job and its pods (needs confirm=True)."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Annotated

from pydantic import Field

from commands._cli import main_for
from skills.shared.confirm import Confirm, require_confirm
from skills.shared.progress import Progress
from skills.shared.tooling import tool
from skills.training_job_deployer.job_spec import JobName
from skills.training_job_deployer.models import JobState
from skills.training_job_deployer.targets.base import Capability
from skills.training_job_deployer.targets.by_name import TargetSettings, get_target


class DeletedJob(JobState):
    """The deleted job's last state. Its CLI exit status is the deletion's (0), not the
    job's: deleting a failed or cancelled job succeeded."""

    def cli_exit_status(self) -> int:
        return 0


@tool(read_only=False, destructive=True, idempotent=False)
def delete_training_job(
    *,
    job_name: JobName,
    target: TargetSettings,
    confirm: Annotated[
        Confirm, Field(description="Must be true: deleting stops it and removes its pods.")
    ] = False,
    progress: Progress | None = None,
) -> JobState:
    """Delete a cluster's training job and its pods (needs confirm=true); checkpoints
    stay. Returns its last state.

    A running job stops. Checkpoints on volumes or in S3 are kept.
    """
    runner = get_target(target)
    runner.require(Capability.DELETE)
    require_confirm(
        confirm, f"Deleting {job_name!r} removes the job and its pods (a running job stops)."
    )
    last = runner.delete(job_name)
    return DeletedJob.model_validate(last, from_attributes=True)


main = main_for(delete_training_job)


if __name__ == "__main__":
    main()
