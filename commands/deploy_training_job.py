"""deploy_training_job: plan, start and follow a distributed FSDP training job."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Annotated

from pydantic import Field

from commands._cli import main_for
from skills.job_orchestration.deploy import DeployCall, deploy
from skills.shared.progress import Progress
from skills.shared.tooling import Flatten, WaitSeconds, spec_of, tool
from skills.training_job_deployer.job_spec import DryRun, JobSpec
from skills.training_job_deployer.targets.by_name import DeployResult, DeploySettings


# destructive: replace=true deletes a job of the same name (a running one only with confirm).
@tool(read_only=False, destructive=True, long=True)
def deploy_training_job(
    *,
    job: Annotated[JobSpec, Flatten()],
    target: DeploySettings,
    dry_run: DryRun = False,
    replace_corrupt_record: Annotated[
        bool,
        Field(
            strict=True,
            description="Set a corrupt job record aside.",
        ),
    ] = False,
    auto_retry: Annotated[
        bool, Field(strict=True, description="On failure: diagnose, fix, resubmit (resumes).")
    ] = False,
    max_retries: Annotated[int, Field(ge=0, le=20, description="Most auto_retry resubmits.")] = 3,
    monitor: Annotated[
        bool, Field(strict=True, description="Follow the job (false: return once started).")
    ] = True,
    include_plan: Annotated[
        bool, Field(strict=True, description="Return the plan after a submit too.")
    ] = False,
    wait_seconds: WaitSeconds = None,
    progress: Progress | None = None,
) -> DeployResult:
    """Start a PyTorch FSDP2 training job (local torchrun, Kubernetes TrainJob or
    PyTorchJob, or Slurm) and follow it; dry_run=true shows the plan first.

    kubernetes: the image is image_uri, else the newest in repository. A re-run
    resumes from its newest checkpoint. auto_retry runs as an operation: the
    result's next_step follows it.
    """
    return deploy(
        spec_of(deploy_training_job),
        DeployCall(
            job=job,
            target=target,
            dry_run=dry_run,
            replace_corrupt_record=replace_corrupt_record,
            auto_retry=auto_retry,
            max_retries=max_retries,
            include_plan=include_plan,
            wait_seconds=wait_seconds if monitor else 0,  # --no-monitor: return once started
        ),
        progress,
    )


main = main_for(deploy_training_job)


if __name__ == "__main__":
    main()
