"""cancel_training_job: stop a running training job (needs confirm=True)."""

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
from skills.training_job_deployer.targets.by_name import TargetSettings, get_target


@tool(read_only=False, destructive=True, idempotent=True)
def cancel_training_job(
    *,
    job_name: JobName,
    target: TargetSettings,
    confirm: Annotated[
        Confirm, Field(description="Must be true: cancelling stops training (checkpoints stay).")
    ] = False,
    progress: Progress | None = None,
) -> JobState:
    """Stop a running training job: SIGTERM to every rank, SIGKILL after 30 s.

    Destructive, so it needs confirm=true. Cancelling a job that already ended
    changes nothing and reports its final state.
    """
    require_confirm(confirm, f"Cancelling {job_name!r} stops its training.")
    return get_target(target).cancel(job_name)


main = main_for(cancel_training_job)


if __name__ == "__main__":
    main()
