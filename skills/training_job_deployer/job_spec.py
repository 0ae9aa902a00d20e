"""The training job as validated data, and the one place a job option is defined.

A JobSpec field is, with no other edit: a deploy_training_job parameter (the tool
flattens JobSpec into its inputs), a CLI flag, an MCP schema property and, when it
carries `TrainerFlag()`, a trainer flag on every target (`trainer_argv`)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    StringConstraints,
    model_validator,
)

from skills.shared.paths import LocalPath
from skills.shared.validators import grammar
from skills.training_job_deployer.job_env import checked_env
from skills.training_job_deployer.model_names import preset_name
from trainer.rules import ShardingStrategy, sharding_spelling

DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
S3_URI = r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?"
# One argv element the trainer reads as a value: no control characters, and no leading
# '-' or space (a leading '-' would be parsed as a flag).
ARG_VALUE = r"^[^-\s\x00-\x1f][^\x00-\x1f]*$"


def known_model_type(value: str) -> str:
    """`value` as given, when it names a preset (itself or an alias); else ValueError
    naming the valid names."""
    preset_name(value)
    return value


# torchrun_path: an absolute path or a bare program name (the launcher on the job's hosts).
# Its length is bounded in the pattern, not the schema (no bytes in every tools/list).
TORCHRUN_PATH = r"(?=.{1,1024}$)(?:(/[A-Za-z0-9._+-]+)+|[A-Za-z0-9._+-]+)"


# A Hugging Face hub id, `org/name`: the trainer downloads it (model, tokenizer) or streams
# it (dataset) inside the job, with HF_TOKEN (trainer/hub.py's is_hub_id: the same rule).
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]{0,95}/[A-Za-z0-9][\w.-]{0,95}$")
DATA_SUFFIXES = (".txt", ".jsonl", ".json", ".parquet", ".safetensors")
HUB_FIELDS = ("model_name_or_path", "tokenizer", "dataset")


def hub_ids(spec: JobSpec) -> dict[str, str]:
    """{field: hub id} of the job's model, tokenizer and dataset that name hub repos
    (not an s3:// URI, a path that exists here or a file name)."""
    return {
        name: value
        for name in HUB_FIELDS
        if isinstance(value := getattr(spec, name), str)
        and HUB_ID.match(value)
        and not value.endswith(DATA_SUFFIXES)
        and not os.path.exists(os.path.expanduser(value))
    }


def hub_lines(spec: JobSpec, where: str, token: str) -> list[str]:
    """What a plan says of the job's hub ids: fetched once per node (or streamed) in the
    job, `where` to, with `token` (where HF_TOKEN comes from; never its value)."""
    return [
        f"{name} {value}: "
        + (
            "streamed in the job, never downloaded whole"
            if name == "dataset"
            else f"fetched once per node at job start into {where}"
        )
        + f"; {token}"
        for name, value in hub_ids(spec).items()
    ]


def hub_cache(environ: Mapping[str, str]) -> str:
    """Where a job that inherits this environment puts hub downloads (huggingface_hub's
    HF_HUB_CACHE / HF_HOME, else the home directory's cache)."""
    if environ.get("HF_HUB_CACHE"):
        return f"{environ['HF_HUB_CACHE']} (HF_HUB_CACHE)"
    if environ.get("HF_HOME"):
        return f"{environ['HF_HOME']} (HF_HOME)"
    return "~/.cache/huggingface (set HF_HOME for a shared volume)"


def hub_endpoint(environ: Mapping[str, str]) -> str | None:
    """The hub mirror the user's own environment names (HF_ENDPOINT): where a job's hub
    client sends HF_TOKEN. None: the public hub. Never a tool argument (job_env.py)."""
    return environ.get("HF_ENDPOINT") or None


def token_source(environ: Mapping[str, str]) -> str:
    """Where a job on this host (or one that inherits its environment) gets HF_TOKEN,
    and the mirror it goes to when the environment names one."""
    given = any(environ.get(name) for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"))
    text = "HF_TOKEN from the submitting environment" if given else "no HF_TOKEN set"
    endpoint = hub_endpoint(environ)
    return f"{text}, hub {endpoint} (HF_ENDPOINT)" if endpoint else text


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
    StringConstraints(min_length=1, max_length=1024),
    grammar(
        ARG_VALUE, "a path, s3:// URI or name (no leading '-' or space, no control characters)"
    ),
    AfterValidator(_location),
]


def _sharding_strategy(value: object) -> object:
    """Other documents' spellings of a strategy (`FULL_SHARD`) as the trainer's."""
    return sharding_spelling(value) if isinstance(value, str) else value


def _env_pairs(value: object) -> object:
    """KEY=VALUE strings (the CLI's repeated flag, an MCP list) as a dict; a dict as is."""
    if isinstance(value, (list, tuple)):
        pairs = {}
        for item in value:
            if not isinstance(item, str) or "=" not in item:
                raise ValueError(f"{item!r} is not KEY=VALUE")
            key, _, val = item.partition("=")
            pairs[key] = val
        return pairs
    return value


def _checked_env(env: dict[str, str]) -> dict[str, str]:
    """No secret, no launcher variable, only documented knobs (job_env.py), and no
    trainer flag that has its own JobSpec field."""
    return checked_env(env, JobSpec.model_fields)


JobEnv = Annotated[
    dict[str, str],
    BeforeValidator(_env_pairs),
    AfterValidator(_checked_env),
    Field(max_length=64, description="NCCL/FI/torch/TRAINER_ knobs, KEY=VALUE (NCCL_DEBUG=INFO)."),
]


@dataclass(frozen=True)
class TrainerFlag:
    """Marks a JobSpec field the trainer takes as `--<field> VALUE` (unset: the trainer's
    default). A field that is also `LocalPath` is resolved by each target for where the
    trainer runs."""


JobName = Annotated[
    str,
    Field(
        description="A DNS-1123 label (a-z, 0-9, '-'; at most 63 chars).",
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
        int, Field(ge=1, le=1024, description="Number of nodes (the local target has one).")
    ] = 1
    gpu_per_node: Annotated[
        int,
        Field(
            ge=1,
            le=64,
            description="GPUs per node (one process each); CPU processes on a host without GPUs.",
        ),
    ] = 2
    model_type: Annotated[
        str,
        Field(pattern=r"^[a-z0-9_]+$", description="Model preset (debug: tiny, CPU)."),
        # An unknown name is refused here, with the valid ones, not in every pod at
        # start; an alias (llama_v3) becomes the preset it names (_resolve_model_type).
        AfterValidator(known_model_type),
        TrainerFlag(),
    ] = "debug"
    model_name_or_path: Annotated[
        Location | None,
        Field(
            description="HF checkpoint (dir, s3:// or hub id org/name) to start from; its "
            "config replaces model_type.",
        ),
        TrainerFlag(),
        LocalPath(hub_name=True, s3=True, where_job_runs=True),
    ] = None
    max_steps: Annotated[
        int | None,
        Field(ge=1, le=10**9, description="Optimizer steps to train (default: the trainer's)."),
        TrainerFlag(),
    ] = None
    train_batch_size: Annotated[
        int | None,
        Field(
            ge=1, le=2**16, description="Sequences per process per step (default: the trainer's)."
        ),
        TrainerFlag(),
    ] = None
    seq_len: Annotated[
        int | None,
        Field(ge=8, le=2**20, description="Tokens per sequence (default: the trainer's)."),
        TrainerFlag(),
    ] = None
    dataset: Annotated[
        Location | None,
        Field(
            description=".txt/.jsonl path, s3:// or hub name (default: the bundled corpus).",
        ),
        TrainerFlag(),
        LocalPath(hub_name=True, s3=True, where_job_runs=True),
    ] = None
    dataset_config_name: Annotated[
        Annotated[str, StringConstraints(max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
        | None,
        Field(description="Hub dataset config (e.g. wikitext-2-raw-v1)."),
        TrainerFlag(),
    ] = None
    tokenizer: Annotated[
        Location | None,
        Field(
            description="tokenizer.json (file, dir, s3://) or hub model name (default: bytes).",
        ),
        TrainerFlag(),
        LocalPath(hub_name=True, s3=True, where_job_runs=True),
    ] = None
    train_on: Annotated[
        Literal["all", "assistant"] | None,
        Field(
            description="Tokens in the loss (all: default; assistant: the assistant turns "
            "of chat records, the prompt masked out).",
        ),
        TrainerFlag(),
    ] = None
    learning_rate: Annotated[
        float | None,
        Field(gt=0, lt=1, description="Peak learning rate (default: the trainer's)."),
        TrainerFlag(),
    ] = None
    min_lr_ratio: Annotated[
        float | None,
        Field(
            ge=0,
            le=1,
            description="Cosine LR floor / peak (default 0.1).",
        ),
        TrainerFlag(),
    ] = None
    max_grad_norm: Annotated[
        float | None,
        Field(ge=0, le=1e6, description="Gradient clip norm (0 = off)."),
        TrainerFlag(),
    ] = None
    grad_accum_steps: Annotated[
        int | None,
        Field(
            ge=1,
            le=2**16,
            description="Micro-batches per optimizer step (default: the trainer's, 1).",
        ),
        TrainerFlag(),
    ] = None
    sharding_strategy: Annotated[
        ShardingStrategy,
        BeforeValidator(_sharding_strategy),
        Field(
            description="FSDP sharding; auto = hybrid across nodes if a node holds it, else full."
        ),
        TrainerFlag(),
    ] = "auto"
    activation_checkpointing: Annotated[
        Literal["none", "selective", "full"] | None,
        Field(
            description="Recompute activations (saves memory; default: none).",
        ),
        TrainerFlag(),
    ] = None
    reduce_dtype: Annotated[
        Literal["float32", "bfloat16"] | None,
        Field(
            description="Gradient reduce dtype (FSDP2; default float32, also with bf16 params).",
        ),
        TrainerFlag(),
    ] = None
    cpu_offload: Annotated[
        bool | None,
        Field(
            description="Keep params, grads and optimizer state on CPU (slower; default off).",
        ),
        TrainerFlag(),
    ] = None
    checkpoint_dir: Annotated[
        Location | None,
        Field(
            description="Local dir or s3:// URI; a re-run resumes from it (local default: "
            "<runs_dir>/<job_name>/checkpoints).",
        ),
        TrainerFlag(),
        LocalPath(s3=True, where_job_runs=True),
    ] = None
    checkpoint_freq: Annotated[
        int | None,
        Field(
            ge=0,
            le=10**9,
            description="Checkpoint every N steps; 0 = only at the end and on SIGTERM.",
        ),
        TrainerFlag(),
    ] = None
    keep_last: Annotated[
        int | None,
        Field(
            ge=0,
            le=10_000,
            description="Complete checkpoints to keep; 0 = all (default: the trainer's).",
        ),
        TrainerFlag(),
    ] = None
    async_save: Annotated[
        bool | None,
        Field(
            description="Write checkpoints in the background (default: on GPUs, if it fits).",
        ),
        TrainerFlag(),
    ] = None
    validation_freq: Annotated[
        int | None,
        Field(
            ge=0,
            le=10**9,
            description="Evaluate on held-out data every N steps; 0 = off.",
        ),
        TrainerFlag(),
    ] = None
    seed: Annotated[
        int,
        Field(ge=0, le=2**32 - 1, description="Random seed: same seed, same data order and init."),
        TrainerFlag(),
    ] = 0
    # torchrun's (or the scheduler's) restarts, not a trainer flag.
    max_restarts: Annotated[
        int,
        Field(
            ge=0,
            le=100,
            description="Restarts on failure; all workers restart, resuming each time.",
        ),
    ] = 0
    adopt_checkpoint_dir: Annotated[
        bool,
        Field(
            strict=True,
            description="Adopt another job's checkpoint_dir; resume from it.",
        ),
    ] = False
    # Every target sets these for every process, after its own (NCCL_DEBUG=INFO replaces
    # the Kubernetes target's WARN).
    env: JobEnv = {}
    # The launcher, not a trainer flag: a program name or an absolute path, never a shell
    # string (it is argv[0] of the launch on the job's hosts).
    torchrun_path: Annotated[
        str | None,
        Field(description="torchrun to launch (absolute path or name; default: torchrun)."),
        grammar(TORCHRUN_PATH, "an absolute path or a program name, no spaces or quotes"),
    ] = None
    # The name the caller gave model_type when it was an alias (llama_v3): the plan says
    # which preset it means and the family's other sizes.
    _model_alias: str | None = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _resolve_model_type(
        cls, data: object, handler: ModelWrapValidatorHandler[JobSpec]
    ) -> JobSpec:
        """model_type as the preset it names, the alias it was given remembered."""
        asked = data.get("model_type") if isinstance(data, Mapping) else None
        try:
            preset = preset_name(asked) if isinstance(asked, str) else None
        except ValueError:  # the field's own check refuses it, naming the valid names
            preset = None
        if not isinstance(data, Mapping) or preset is None or preset == asked:
            return handler(data)
        spec = handler({**data, "model_type": preset})
        spec._model_alias = asked
        return spec

    @property
    def model_alias(self) -> str | None:
        """The alias model_type was given as (None: the preset's own name)."""
        return self._model_alias

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


def launcher(spec: JobSpec, python: str | None, flags: Sequence[str] = ()) -> list[str]:
    """argv's start on every target: the job's torchrun_path, else torchrun of `python`
    (`python [flags] -m torch.distributed.run`), else (None) `torchrun` on the PATH."""
    if spec.torchrun_path:
        return [spec.torchrun_path]
    return ["torchrun"] if python is None else [python, *flags, "-m", "torch.distributed.run"]


# Fields of the job tools that are not part of the job itself.
# Strict: over MCP, "false" or 0 must not start a job by accident.
DryRun = Annotated[
    bool,
    Field(strict=True, description="Return the exact plan; start nothing."),
]
