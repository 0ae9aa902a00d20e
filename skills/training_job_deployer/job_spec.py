"""The training job as validated data, and the one place a job option is defined.

A JobSpec field is, with no other edit: a deploy_training_job parameter (the tool
flattens JobSpec into its inputs), a CLI flag, an MCP schema property and, when it
carries `TrainerFlag()`, a trainer flag on every target (`trainer_argv`)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
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


@dataclass(frozen=True)
class TrainerFlag:
    """Marks a JobSpec field the trainer takes as `--<field> VALUE` (unset: the trainer's
    default). `path`: the value may be a local path, which a target resolves for where
    the trainer runs; `hub_name`: it may also be a Hugging Face hub name."""

    path: bool = False
    hub_name: bool = False


JobName = Annotated[
    str,
    Field(
        description="Job name: a DNS-1123 label (lowercase letters, digits, '-'; starts and ends "
        "alphanumeric; at most 63 chars). Also the run directory's name.",
        pattern=DNS1123_LABEL,
        max_length=63,
    ),
]


class JobSpec(BaseModel):
    """Everything that defines a training run. None means: the trainer's own default.
    Trainer flags are passed in field order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    job_name: JobName
    num_nodes: Annotated[
        int, Field(ge=1, description="Number of nodes (the local target has one).")
    ] = 1
    gpu_per_node: Annotated[
        int,
        Field(
            ge=1,
            description="GPUs per node, one training process each; on a host without GPUs, "
            "the number of CPU worker processes.",
        ),
    ] = 2
    model_type: Annotated[
        str,
        Field(
            pattern=r"^[a-z0-9_]+$", description="Trainer model preset, e.g. 'debug' (tiny, CPU)."
        ),
        TrainerFlag(),
    ] = "debug"
    model_name_or_path: Annotated[
        Location | None,
        Field(
            description="An HF Llama checkpoint directory (config.json + *.safetensors; local "
            "path or s3:// URI) to start from; its config.json defines the model instead of "
            "model_type (default: none, a random init of the preset).",
        ),
        TrainerFlag(path=True, hub_name=True),
    ] = None
    max_steps: Annotated[
        int | None,
        Field(ge=1, description="Optimizer steps to train (default: the trainer's)."),
        TrainerFlag(),
    ] = None
    train_batch_size: Annotated[
        int | None,
        Field(ge=1, description="Sequences per process per step (default: the trainer's)."),
        TrainerFlag(),
    ] = None
    seq_len: Annotated[
        int | None,
        Field(ge=8, description="Tokens per sequence (default: the trainer's)."),
        TrainerFlag(),
    ] = None
    dataset: Annotated[
        Location | None,
        Field(
            description="Training text: a .txt/.jsonl file or directory, an s3:// URI of either, "
            "or a Hugging Face hub dataset name (default: the English corpus bundled with the "
            "trainer).",
        ),
        TrainerFlag(path=True, hub_name=True),
    ] = None
    dataset_config_name: Annotated[
        Annotated[str, StringConstraints(max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
        | None,
        Field(description="Hugging Face hub dataset configuration, e.g. 'wikitext-2-raw-v1'."),
        TrainerFlag(),
    ] = None
    tokenizer: Annotated[
        Location | None,
        Field(
            description="A tokenizer.json file, a directory holding one, an s3:// URI of either, "
            "or a hub model name (default: the trainer's byte-level tokenizer).",
        ),
        TrainerFlag(path=True, hub_name=True),
    ] = None
    learning_rate: Annotated[
        float | None,
        Field(gt=0, lt=1, description="Peak learning rate (default: the trainer's)."),
        TrainerFlag(),
    ] = None
    grad_accum_steps: Annotated[
        int | None,
        Field(ge=1, description="Micro-batches per optimizer step (default: the trainer's, 1)."),
        TrainerFlag(),
    ] = None
    sharding_strategy: Annotated[
        Literal["full", "shard_grad_op", "hybrid", "no_shard"],
        Field(
            description="FSDP sharding: full (reshard after forward), shard_grad_op (keep params "
            "gathered), hybrid (replicate across nodes, shard within), no_shard."
        ),
        TrainerFlag(),
    ] = "full"
    activation_checkpointing: Annotated[
        Literal["none", "selective", "full"] | None,
        Field(
            description="Recompute activations in backward to save memory: none, selective "
            "(keep matmul/attention outputs, recompute the cheap ops) or full (keep only each "
            "block's input); default: the trainer's (none).",
        ),
        TrainerFlag(),
    ] = None
    cpu_offload: Annotated[
        bool | None,
        Field(
            description="Keep parameters, gradients and optimizer state on CPU: slower, for "
            "models that do not fit in GPU memory (default: the trainer's, off).",
        ),
        TrainerFlag(),
    ] = None
    checkpoint_dir: Annotated[
        Location | None,
        Field(
            description="Where checkpoints go: a local directory or an s3:// URI. A re-run of a "
            "job with the same checkpoint_dir resumes from its newest complete checkpoint (local "
            "target default: <runs_dir>/<job_name>/checkpoints).",
        ),
        TrainerFlag(path=True),
    ] = None
    checkpoint_freq: Annotated[
        int | None,
        Field(
            ge=0,
            description="Save a checkpoint every N steps; 0 = only at the end (the last step and "
            "a SIGTERM always save; default: the trainer's).",
        ),
        TrainerFlag(),
    ] = None
    keep_last: Annotated[
        int | None,
        Field(ge=0, description="Complete checkpoints to keep; 0 = all (default: the trainer's)."),
        TrainerFlag(),
    ] = None
    async_save: Annotated[
        bool | None,
        Field(
            description="Write checkpoints in the background while training goes on (default: "
            "the trainer's, off).",
        ),
        TrainerFlag(),
    ] = None
    validation_freq: Annotated[
        int | None,
        Field(
            ge=0,
            description="Evaluate on held-out data every N steps (and at the last step); 0 = off "
            "(default: the trainer's).",
        ),
        TrainerFlag(),
    ] = None
    seed: Annotated[
        int,
        Field(ge=0, description="Random seed: same seed, same data order and init."),
        TrainerFlag(),
    ] = 0
    # torchrun's (or the scheduler's) restarts, not a trainer flag.
    max_restarts: Annotated[
        int,
        Field(
            ge=0,
            description="Restart all workers up to N times after a worker fails; each restart "
            "resumes from the newest complete checkpoint.",
        ),
    ] = 0

    def trainer_args(self) -> list[str]:
        return trainer_argv(self)


@cache
def trainer_flags(model: type[JobSpec] = JobSpec) -> dict[str, TrainerFlag]:
    """The fields of a JobSpec (or a subclass) that are trainer flags, in field order."""
    return {
        name: marker
        for name, info in model.model_fields.items()
        for marker in info.metadata
        if isinstance(marker, TrainerFlag)
    }


def render_arg(value: object) -> str:
    """A value as the trainer's flags take it: bools as true/false."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def trainer_argv(spec: JobSpec) -> list[str]:
    """The trainer's flags for this job, the same on every target; fields left None are
    omitted so the trainer's defaults apply."""
    args: list[str] = []
    for name in trainer_flags(type(spec)):
        value = getattr(spec, name)
        if value is not None:
            args += [f"--{name}", render_arg(value)]
    return args


TRAINER_FIELDS = tuple(trainer_flags())


# Fields of the job tools that are not part of the job itself.
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
