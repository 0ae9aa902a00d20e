"""deploy_training_job: plan, start and follow a distributed FSDP training job."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Annotated

from pydantic import Field

from skills.shared.cli import main_for
from skills.shared.progress import Progress
from skills.shared.tooling import Flatten, tool
from skills.training_job_deployer.job_spec import DryRun, JobSpec, WaitSeconds
from skills.training_job_deployer.targets import DeployResult, DeploySettings, get_target


@tool(read_only=False, long=True)
def deploy_training_job(
    *,
    job: Annotated[JobSpec, Flatten()],
    target: DeploySettings,
    dry_run: DryRun = False,
    replace_corrupt_record: Annotated[
        bool,
        Field(
            strict=True,
            description="Start over when the job's record is unreadable (it is set aside).",
        ),
    ] = False,
    wait_seconds: WaitSeconds = None,
    progress: Progress | None = None,
) -> DeployResult:
    """Launch a distributed PyTorch FSDP2 training job and follow it.

    target=local runs torchrun here in <runs_dir>/<job_name>/; target=kubernetes
    creates a Kubeflow PyTorchJob (cluster_name or kubeconfig/context; the image is
    image_uri or the newest in repository; a driver/CUDA check runs first). A re-run
    of the same job resumes from its newest complete checkpoint. dry_run=true returns the exact
    plan and starts nothing. Returns status, steps, losses, tokens/s and checkpoint;
    a failed job adds the trainer's error and log tail, a preempted one where a
    re-run resumes.
    """
    runner = get_target(target)
    plan = runner.plan(job)
    if dry_run:
        return DeployResult(
            job_name=job.job_name,
            target=runner.name,
            status="planned",
            dry_run=True,
            plan=plan,
            max_steps=job.max_steps,
            run_dir=getattr(plan, "run_dir", None),
            log_path=getattr(plan, "log_path", None),
        )
    runner.submit(job.job_name, plan, replace_corrupt_record=replace_corrupt_record)
    try:
        state = runner.follow(job.job_name, progress, wait_seconds)
    except KeyboardInterrupt:
        # The job runs in its own session; a person's Ctrl-C means stop it too. (An MCP
        # client's cancel only stops following: the job goes on, as after wait_seconds.)
        runner.cancel(job.job_name, grace_s=10)
        raise
    return DeployResult(**state.model_dump(), plan=plan)


main = main_for(deploy_training_job)


if __name__ == "__main__":
    main()
