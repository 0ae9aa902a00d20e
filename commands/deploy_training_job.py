"""deploy_training_job: plan, start and follow a distributed FSDP training job."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from skills.shared.cli import main_for
from skills.shared.progress import Progress
from skills.shared.tooling import tool
from skills.training_job_deployer.job_spec import (
    ActivationCheckpointing,
    AsyncSave,
    CheckpointDir,
    CheckpointFreq,
    CpuOffload,
    Dataset,
    DatasetConfigName,
    DryRun,
    GpuPerNode,
    GradAccumSteps,
    JobName,
    JobSpec,
    KeepLast,
    LearningRate,
    MaxRestarts,
    MaxSteps,
    ModelNameOrPath,
    ModelType,
    NumNodes,
    RunsDirParam,
    Seed,
    SeqLen,
    ShardingStrategy,
    Target,
    Tokenizer,
    TrainBatchSize,
    ValidationFreq,
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
    model_name_or_path: ModelNameOrPath = None,
    dataset: Dataset = None,
    dataset_config_name: DatasetConfigName = None,
    tokenizer: Tokenizer = None,
    grad_accum_steps: GradAccumSteps = None,
    activation_checkpointing: ActivationCheckpointing = None,
    cpu_offload: CpuOffload = None,
    checkpoint_dir: CheckpointDir = None,
    checkpoint_freq: CheckpointFreq = None,
    keep_last: KeepLast = None,
    async_save: AsyncSave = None,
    validation_freq: ValidationFreq = None,
    max_restarts: MaxRestarts = 0,
    runs_dir: RunsDirParam = "runs",
    dry_run: DryRun = False,
    wait_seconds: WaitSeconds = None,
    progress: Progress | None = None,
) -> DeployResult:
    """Launch a distributed PyTorch FSDP2 training job and follow it.

    target=local runs torchrun on this host (gloo on CPU, nccl on GPUs) in
    <runs_dir>/<job_name>/, streaming step, loss and tokens/s as progress.
    Checkpoints go to checkpoint_dir (local default: <runs_dir>/<job_name>/
    checkpoints), so re-running the same job resumes from its newest complete
    checkpoint. dry_run=True returns the exact launch plan (argv, environment,
    directory) and starts nothing. Returns the job's state: status, steps, first
    and last loss, eval loss, tokens/s, last checkpoint, run directory and log
    path; a failed run carries the trainer's error line and the log tail, a
    preempted one (SIGTERM, checkpoint saved) says from which step a re-run resumes.
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
        model_name_or_path=model_name_or_path,
        dataset=dataset,
        dataset_config_name=dataset_config_name,
        tokenizer=tokenizer,
        grad_accum_steps=grad_accum_steps,
        activation_checkpointing=activation_checkpointing,
        cpu_offload=cpu_offload,
        checkpoint_dir=checkpoint_dir,
        checkpoint_freq=checkpoint_freq,
        keep_last=keep_last,
        async_save=async_save,
        validation_freq=validation_freq,
        max_restarts=max_restarts,
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
