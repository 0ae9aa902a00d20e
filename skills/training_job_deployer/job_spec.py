"""The training job as validated data. Each field's rule and description live in
one Annotated type here, shared by JobSpec and the tools that take the field."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
S3_URI = r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?"
# One argv element the trainer reads as a value: no control characters, and no leading
# '-' or space (a leading '-' would be parsed as a flag).
ARG_VALUE = r"^[^-\s\x00-\x1f][^\x00-\x1f]*$"


def _location(value: str) -> str:
    """A local path, an s3:// URI or a hub name; other URI schemes are not supported."""
    if value.startswith("s3://"):
        if not re.fullmatch(S3_URI, value):
            raise ValueError("an s3:// URI must be s3://<bucket>[/<prefix>]")
    elif "://" in value:
        raise ValueError("only local paths and s3:// URIs are supported")
    return value


# A local path, an s3:// URI or (where the field says so) a Hugging Face hub name.
Location = Annotated[
    str,
    StringConstraints(min_length=1, max_length=1024, pattern=ARG_VALUE),
    AfterValidator(_location),
]

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
ModelNameOrPath = Annotated[
    Location | None,
    Field(
        description="An HF Llama checkpoint directory (config.json + *.safetensors; local path "
        "or s3:// URI) to start from; its config.json defines the model instead of model_type "
        "(default: none, a random init of the preset).",
    ),
]
Dataset = Annotated[
    Location | None,
    Field(
        description="Training text: a .txt/.jsonl file or directory, an s3:// URI of either, or "
        "a Hugging Face hub dataset name (default: the English corpus bundled with the trainer).",
    ),
]
DatasetConfigName = Annotated[
    Annotated[str, StringConstraints(max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
    | None,
    Field(description="Hugging Face hub dataset configuration, e.g. 'wikitext-2-raw-v1'."),
]
Tokenizer = Annotated[
    Location | None,
    Field(
        description="A tokenizer.json file, a directory holding one, an s3:// URI of either, or "
        "a hub model name (default: the trainer's byte-level tokenizer).",
    ),
]
GradAccumSteps = Annotated[
    int | None,
    Field(ge=1, description="Micro-batches per optimizer step (default: the trainer's, 1)."),
]
ActivationCheckpointing = Annotated[
    Literal["none", "selective", "full"] | None,
    Field(
        description="Recompute activations in backward to save memory: none, selective "
        "(keep matmul/attention outputs, recompute the cheap ops) or full (keep only each "
        "block's input); default: the trainer's (none).",
    ),
]
CpuOffload = Annotated[
    bool | None,
    Field(
        description="Keep parameters, gradients and optimizer state on CPU: slower, for "
        "models that do not fit in GPU memory (default: the trainer's, off).",
    ),
]
CheckpointDir = Annotated[
    Location | None,
    Field(
        description="Where checkpoints go: a local directory or an s3:// URI. A re-run of a job "
        "with the same checkpoint_dir resumes from its newest complete checkpoint (local "
        "target default: <runs_dir>/<job_name>/checkpoints).",
    ),
]
CheckpointFreq = Annotated[
    int | None,
    Field(
        ge=0,
        description="Save a checkpoint every N steps; 0 = only at the end (the last step and a "
        "SIGTERM always save; default: the trainer's).",
    ),
]
KeepLast = Annotated[
    int | None,
    Field(ge=0, description="Complete checkpoints to keep; 0 = all (default: the trainer's)."),
]
AsyncSave = Annotated[
    bool | None,
    Field(
        description="Write checkpoints in the background while training goes on (default: the "
        "trainer's, off).",
    ),
]
ValidationFreq = Annotated[
    int | None,
    Field(
        ge=0,
        description="Evaluate on held-out data every N steps (and at the last step); 0 = off "
        "(default: the trainer's).",
    ),
]
MaxRestarts = Annotated[
    int,
    Field(
        ge=0,
        description="torchrun restarts all workers up to N times after a worker fails; each "
        "restart resumes from the newest complete checkpoint.",
    ),
]

# Trainer flags, in the order they are passed. (max_restarts is torchrun's, not here.)
TRAINER_FIELDS = (
    "model_type",
    "model_name_or_path",
    "max_steps",
    "train_batch_size",
    "seq_len",
    "dataset",
    "dataset_config_name",
    "tokenizer",
    "learning_rate",
    "grad_accum_steps",
    "sharding_strategy",
    "activation_checkpointing",
    "cpu_offload",
    "checkpoint_dir",
    "checkpoint_freq",
    "keep_last",
    "async_save",
    "validation_freq",
    "seed",
)


def render_arg(value: object) -> str:
    """A value as the trainer's flags take it: bools as true/false."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


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
    model_name_or_path: ModelNameOrPath = None
    dataset: Dataset = None
    dataset_config_name: DatasetConfigName = None
    tokenizer: Tokenizer = None
    grad_accum_steps: GradAccumSteps = None
    activation_checkpointing: ActivationCheckpointing = None
    cpu_offload: CpuOffload = None
    checkpoint_dir: CheckpointDir = None
    checkpoint_freq: CheckpointFreq = None
    keep_last: KeepLast = None
    async_save: AsyncSave = None
    validation_freq: ValidationFreq = None
    max_restarts: MaxRestarts = 0

    def trainer_args(self) -> list[str]:
        """The trainer's flags; fields left None are omitted so the trainer's defaults apply."""
        args: list[str] = []
        for name in TRAINER_FIELDS:
            value = getattr(self, name)
            if value is not None:
                args += [f"--{name}", render_arg(value)]
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
