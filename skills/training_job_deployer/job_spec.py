"""The training job as validated data. Each field's rule and description live in
one Annotated type here, shared by JobSpec and the tools that take the field."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"

JobName = Annotated[
    str,
    Field(
        description="Job name: a DNS-1123 label (lowercase letters, digits, '-'; starts and ends "
        "alphanumeric; at most 63 chars). Also the run directory's name.",
        pattern=DNS1123_LABEL,
        max_length=63,
    ),
]
Target = Annotated[
    Literal["local"],
    Field(description="Where the job runs: 'local' launches torchrun on this host."),
]
NumNodes = Annotated[int, Field(ge=1, description="Number of nodes (the local target has one).")]
GpuPerNode = Annotated[
    int,
    Field(
        ge=1,
        description="GPUs per node, one training process each; on a host without GPUs, the "
        "number of CPU worker processes.",
    ),
]
ModelType = Annotated[
    str,
    Field(pattern=r"^[a-z0-9_]+$", description="Trainer model preset, e.g. 'debug' (tiny, CPU)."),
]
MaxSteps = Annotated[
    int | None, Field(ge=1, description="Optimizer steps to train (default: the trainer's).")
]
TrainBatchSize = Annotated[
    int | None, Field(ge=1, description="Sequences per process per step (default: the trainer's).")
]
SeqLen = Annotated[
    int | None, Field(ge=8, description="Tokens per sequence (default: the trainer's).")
]
LearningRate = Annotated[
    float | None, Field(gt=0, lt=1, description="Peak learning rate (default: the trainer's).")
]
ShardingStrategy = Annotated[
    Literal["full", "shard_grad_op", "hybrid", "no_shard"],
    Field(
        description="FSDP sharding: full (reshard after forward), shard_grad_op (keep params "
        "gathered), hybrid (replicate across nodes, shard within), no_shard."
    ),
]
Seed = Annotated[int, Field(ge=0, description="Random seed: same seed, same data order and init.")]

# Trainer flags, in the order they are passed.
TRAINER_FIELDS = (
    "model_type",
    "max_steps",
    "train_batch_size",
    "seq_len",
    "learning_rate",
    "sharding_strategy",
    "seed",
)


class JobSpec(BaseModel):
    """Everything that defines a training run. None means: the trainer's own default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    job_name: JobName
    num_nodes: NumNodes = 1
    gpu_per_node: GpuPerNode = 2
    model_type: ModelType = "debug"
    max_steps: MaxSteps = None
    train_batch_size: TrainBatchSize = None
    seq_len: SeqLen = None
    learning_rate: LearningRate = None
    sharding_strategy: ShardingStrategy = "full"
    seed: Seed = 0

    def trainer_args(self) -> list[str]:
        """The trainer's flags; fields left None are omitted so the trainer's defaults apply."""
        args: list[str] = []
        for name in TRAINER_FIELDS:
            value = getattr(self, name)
            if value is not None:
                args += [f"--{name}", str(value)]
        return args


# Fields of the job tools that are not part of the job itself.
RunsDirParam = Annotated[
    str, Field(description="Local target: the directory holding one run directory per job.")
]
DryRun = Annotated[
    bool,
    Field(
        description="Return the exact launch plan (argv, environment, directory); start nothing."
    ),
]
WaitSeconds = Annotated[
    float | None,
    Field(
        ge=0,
        description="Seconds to follow the job before returning its current state; "
        "None follows it to the end (the CLI's default). MCP calls default to 40 s so an "
        "agent is never blocked: poll with get_training_job.",
    ),
]
