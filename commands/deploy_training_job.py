"""deploy_training_job: plan, start and follow a distributed FSDP training job."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from skills.shared.cli import main_for
from skills.shared.progress import Progress
from skills.shared.tooling import tool
from skills.training_job_deployer.job_spec import (
    DryRun,
    GpuPerNode,
    JobName,
    JobSpec,
    LearningRate,
    MaxSteps,
    ModelType,
    NumNodes,
    RunsDirParam,
    Seed,
    SeqLen,
    ShardingStrategy,
    Target,
    TrainBatchSize,
    WaitSeconds,
)
from skills.training_job_deployer.models import DeployResult
from skills.training_job_deployer.targets import get_target


@tool(read_only=False, destructive=False, idempotent=False)
def deploy_training_job(
    *,
    job_name: JobName,
    target: Target = "local",
    num_nodes: NumNodes = 1,
    gpu_per_node: GpuPerNode = 2,
    model_type: ModelType = "debug",
    max_steps: MaxSteps = None,
    train_batch_size: TrainBatchSize = None,
    seq_len: SeqLen = None,
    learning_rate: LearningRate = None,
    sharding_strategy: ShardingStrategy = "full",
    seed: Seed = 0,
    runs_dir: RunsDirParam = "runs",
    dry_run: DryRun = False,
    wait_seconds: WaitSeconds = None,
    progress: Progress | None = None,
) -> DeployResult:
    """Launch a distributed PyTorch FSDP2 training job and follow it.

    target=local runs torchrun on this host (gloo on CPU, nccl on GPUs) in
    <runs_dir>/<job_name>/, streaming step, loss and tokens/s as progress.
    dry_run=True returns the exact launch plan (argv, environment, directory)
    and starts nothing. Returns the job's state: status, steps, first and last
    loss, tokens/s, run directory and log path; a failed run carries the
    trainer's error line and the log tail.
    """
    spec = JobSpec(
        job_name=job_name,
        num_nodes=num_nodes,
        gpu_per_node=gpu_per_node,
        model_type=model_type,
        max_steps=max_steps,
        train_batch_size=train_batch_size,
        seq_len=seq_len,
        learning_rate=learning_rate,
        sharding_strategy=sharding_strategy,
        seed=seed,
    )
    runner = get_target(target, runs_dir)
    plan = runner.plan(spec)
    if dry_run:
        return DeployResult(
            job_name=job_name,
            target=target,
            status="planned",
            dry_run=True,
            plan=plan,
            max_steps=max_steps,
            run_dir=plan.run_dir,
            log_path=plan.log_path,
        )
    runner.submit(job_name, plan)
    try:
        state = runner.follow(job_name, progress, wait_seconds)
    except KeyboardInterrupt:
        # The job runs in its own session; a person's Ctrl-C means stop it too.
        runner.cancel(job_name, grace_s=10)
        raise
    return DeployResult(**state.model_dump(), plan=plan)


main = main_for(deploy_training_job)


if __name__ == "__main__":
    main()
