"""The trainer's configuration: one dataclass tree, and each setting written once.

A setting that is a flag carries its help text and its rules (ranges, choices) in its
field's metadata (`setting(...)`); its type is the field's annotation. The flag table
(`flag_table`), the parser and the range checks of `validate` are all derived from the
tree, so a new setting is one field. Filling the tree from flags, YAML and the
environment is config_loader.py's job; this module imports nothing of the trainer but
the presets (plain data), so every other module can depend on it.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from trainer.presets import ALIASES, PRESETS
from trainer.rules import SHARDING_STRATEGIES

AC_MODES = ("none", "selective", "full")
REDUCE_DTYPES = ("float32", "bfloat16")
TRAIN_ON = ("all", "assistant")


class ConfigError(ValueError):
    """The job was configured wrongly; retrying the same flags cannot succeed."""


@dataclass(frozen=True)
class Rules:
    """A flag's help and the bounds its value must keep (None: unchecked)."""

    help: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple[str, ...] | None = None

    def problem(self, name: str, value: Any) -> str | None:
        """What is wrong with `value`, or None."""
        if value is None:
            return None
        if self.choices is not None and value not in self.choices:
            return f"unknown {name} {value!r}; choose one of {', '.join(self.choices)}"
        if self.ge is not None and self.lt is not None and not self.ge <= value < self.lt:
            return f"{name} must be in [{self.ge:g}, {self.lt:g})"
        for bound, ok, op in (
            (self.ge, lambda b: value >= b, ">="),
            (self.gt, lambda b: value > b, ">"),
            (self.le, lambda b: value <= b, "<="),
            (self.lt, lambda b: value < b, "<"),
        ):
            if bound is not None and not ok(bound):
                return f"{name} must be {op} {bound:g}"
        return None


def setting(default: Any, help: str, **rules: Any) -> Any:
    """A field that is also a flag (`--<field name>`), with its help and rules."""
    return field(default=default, metadata={"flag": Rules(help, **rules)})


@dataclass
class RopeScaling:
    """Llama-3.1 RoPE frequency scaling (HF `rope_scaling` with rope_type "llama3")."""

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass
class ModelConfig:
    """The model's shape. Flags override the preset's (or the HF config.json's) values."""

    dim: int = setting(128, "hidden size", ge=1)
    n_layers: int = setting(2, "transformer blocks", ge=1)
    n_heads: int = setting(4, "attention heads", ge=1)
    n_kv_heads: int = setting(2, "key/value heads (GQA)", ge=1)
    vocab_size: int = setting(512, "embedding rows", ge=1)
    # FFN width: HF's `intermediate_size` when given, else Llama's 8/3*dim rounded
    # up to a multiple of `multiple_of`.
    ffn_hidden_dim: int | None = setting(None, "SwiGLU inner width", ge=1)
    multiple_of: int = 64
    max_seq_len: int = setting(512, "longest supported sequence", ge=1)
    rope_theta: float = setting(10000.0, "RoPE base", gt=0)
    rope_scaling: RopeScaling | None = None
    norm_eps: float = setting(1e-5, "RMSNorm epsilon", gt=0)
    tie_word_embeddings: bool = setting(False, "share embedding and lm_head")
    # A checkpoint of another family than Llama (Mistral, Qwen, Gemma, ...): its
    # config.json, which builds the transformers class (trainer/families.py); the
    # fields above then only describe its size.
    hf_config: dict[str, Any] | None = None

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def attention_dim(self) -> int:
        """The queries' width, n_heads x head_dim, which attention's score and value
        matmuls scale with: not `dim` where a family sets its own head_dim (Qwen3's
        0.6B: 16 x 128 = 2048 against dim 1024; Gemma 2's 2B: 8 x 256 against 2304)."""
        head_dim = (self.hf_config or {}).get("head_dim") or self.head_dim
        return self.n_heads * head_dim

    @property
    def hidden_dim(self) -> int:
        if self.ffn_hidden_dim is not None:
            return self.ffn_hidden_dim
        hidden = int(2 * 4 * self.dim / 3)
        return self.multiple_of * ((hidden + self.multiple_of - 1) // self.multiple_of)


@dataclass
class DataConfig:
    dataset: str | None = setting(
        None,
        "a .txt/.jsonl file or dir, s3:// URI or HF hub dataset; None = the bundled corpus",
    )
    dataset_config_name: str | None = setting(None, "HF hub dataset config")
    tokenizer: str | None = setting(
        None, "tokenizer.json path/dir, s3:// or hub name; None = byte-level"
    )
    seq_len: int = setting(128, "tokens per training sequence", ge=1)
    # Taken from the end of the token stream.
    validation_split: float = setting(0.05, "share of tokens held out for eval", ge=0, lt=1)
    # assistant: chat records train on the assistant turns only (the loss ignores the
    # prompt); plain text records are trained on whole either way.
    train_on: str = setting(
        "all", f"tokens the loss counts: {'|'.join(TRAIN_ON)}", choices=TRAIN_ON
    )


@dataclass
class OptimConfig:
    learning_rate: float = setting(3e-3, "peak AdamW learning rate", gt=0)
    weight_decay: float = setting(0.1, "AdamW weight decay (matrices only)", ge=0)
    warmup_steps: int = setting(10, "linear warmup steps before cosine decay", ge=0)
    min_lr_ratio: float = setting(
        0.1, "the cosine decay's floor, as a share of the peak learning rate", ge=0, le=1
    )
    max_grad_norm: float = setting(1.0, "gradient clipping norm (0 = off)", ge=0)
    grad_accum_steps: int = setting(1, "micro-batches per optimizer step", ge=1)


@dataclass
class ParallelConfig:
    # auto: hybrid (HSDP) when the job spans more than one node, else full.
    sharding_strategy: str = setting(
        "auto",
        f"FSDP strategy: {'|'.join(SHARDING_STRATEGIES)}",
        choices=SHARDING_STRATEGIES,
    )
    # torchao's tensorwise float8 GEMMs for the large linears (trainer/float8.py); refused
    # at start on a GPU below SM 8.9 and without a GPU.
    float8: bool = setting(False, "Float8 linears (torchao), SM 8.9+ GPUs")
    activation_checkpointing: str = setting(
        "none", f"recompute activations in backward: {'|'.join(AC_MODES)}", choices=AC_MODES
    )
    # fp32 gradient reduction with bf16 parameters is the usual choice at scale: a sum
    # over hundreds of ranks in bf16 loses the small gradients (8 mantissa bits). bf16
    # halves the bytes of every reduce-scatter (and HSDP's all-reduce across nodes):
    # worth it when the network is the bottleneck and the world is small.
    reduce_dtype: str = setting(
        "float32",
        f"gradient reduce dtype: {'|'.join(REDUCE_DTYPES)} (bf16: half the traffic, "
        "less precise sums)",
        choices=REDUCE_DTYPES,
    )
    compile: bool = setting(False, "torch.compile each transformer block")
    cpu_offload: bool = setting(False, "keep params/grads/optimizer state on CPU")


@dataclass
class CheckpointConfig:
    # A local dir (hostPath, PVC, FSx) or an s3:// URI.
    checkpoint_dir: str | None = setting(None, "local dir or s3:// URI; None = off")
    # The last step and SIGTERM always save.
    checkpoint_freq: int = setting(100, "save every N steps (0 = end only)", ge=0)
    keep_last: int = setting(2, "complete checkpoints to keep (0 = all)", ge=0)
    # None: on for a GPU when the node holds the staged copy (checkpoint.choose_staging).
    async_save: bool | None = setting(
        None, "write checkpoints while training goes on (default: on GPUs when it fits)"
    )
    resume: bool = setting(True, "resume from the newest complete checkpoint")


@dataclass
class MetricsConfig:
    log_freq: int = setting(10, "emit a step line every N steps", ge=1)
    validation_freq: int = setting(50, "evaluate every N steps (0 = off)", ge=0)
    validation_batches: int = setting(4, "eval batches per rank, per evaluation", ge=1)


@dataclass
class TrainConfig:
    model_type: str = setting(
        "debug", f"model preset: {', '.join(PRESETS)} (or {', '.join(ALIASES)})"
    )
    model_name_or_path: str | None = setting(
        None, "HF checkpoint dir (local or s3://) of a decoder-only causal LM to start from"
    )
    trust_remote_code: bool = setting(
        False, "run a checkpoint's own model code (config.json auto_map)"
    )
    max_steps: int = setting(200, "optimizer steps to run", ge=1)
    train_batch_size: int = setting(8, "sequences per rank per micro-batch", ge=1)
    seed: int = setting(0, "seed for model init and data order")
    output_dir: str | None = setting(None, "where the run writes its files (config.json)")
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


SECTIONS = tuple(
    f.name for f in dataclasses.fields(TrainConfig) if dataclasses.is_dataclass(f.default_factory)
)


@dataclass(frozen=True)
class Flag:
    """One row of the flag table: `--<name>` sets `path` in the tree."""

    name: str
    path: str  # dotted, e.g. "optim.learning_rate"
    type: type  # int, float, str or bool (None is always allowed: the default)
    rules: Rules


def _value_type(annotation: Any) -> type:
    """`int | None` -> int; a plain type stays itself."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        (inner,) = [a for a in typing.get_args(annotation) if a is not type(None)]
        return inner
    return annotation


def _flags_of(cls: type, prefix: str) -> list[Flag]:
    hints = typing.get_type_hints(cls)
    rows: list[Flag] = []
    for f in dataclasses.fields(cls):
        if f.name in SECTIONS and not prefix:
            rows += _flags_of(hints[f.name], f"{f.name}.")
        elif "flag" in f.metadata:
            rows.append(
                Flag(f.name, prefix + f.name, _value_type(hints[f.name]), f.metadata["flag"])
            )
    return rows


@cache
def flag_table() -> dict[str, Flag]:
    """Every flag, by its flat name (the leaf name: `--learning_rate`), in tree order."""
    rows = _flags_of(TrainConfig, "")
    table = {row.name: row for row in rows}
    assert len(table) == len(rows), "two settings share a flat flag name"
    return table


def get_path(cfg: Any, path: str) -> Any:
    for part in path.split("."):
        cfg = getattr(cfg, part)
    return cfg


def set_path(cfg: Any, path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for part in parents:
        cfg = getattr(cfg, part)
    setattr(cfg, leaf, value)


def validate(cfg: TrainConfig) -> None:
    """Check every rule (each flag's own, then those across settings) and report all
    violations at once."""
    problems = [
        problem
        for flag in flag_table().values()
        if (problem := flag.rules.problem(flag.name, get_path(cfg, flag.path))) is not None
    ]
    problems += _cross_field_problems(cfg)
    if problems:
        raise ConfigError("; ".join(problems))


def _cross_field_problems(cfg: TrainConfig) -> list[str]:
    m = cfg.model
    problems: list[str] = []
    if cfg.data.seq_len > m.max_seq_len:
        problems.append(
            f"seq_len {cfg.data.seq_len} exceeds max_seq_len {m.max_seq_len} of the model"
        )
    if m.hf_config is None and m.n_heads >= 1 and m.n_kv_heads >= 1:
        if m.dim % m.n_heads:
            problems.append("dim must be divisible by n_heads")
        if m.n_heads % m.n_kv_heads:
            problems.append("n_heads must be divisible by n_kv_heads")
        if m.head_dim % 2:
            problems.append("head_dim must be even for RoPE")
    for name in ("dataset", "tokenizer"):
        if (problem := missing_local(name, getattr(cfg.data, name))) is not None:
            problems.append(problem)
    return problems


def device_problems(cfg: TrainConfig, has_gpu: bool) -> list[str]:
    """What the settings ask of a GPU a run without one cannot give (checked by the
    trainer at start, and by a plan that knows the host's GPUs)."""
    # cpu_offload without a GPU runs: the same offload path (gloo for the CPU-side
    # tensors, the CPU optimizer), a test of what a GPU run does, saving no memory.
    if cfg.parallel.float8 and not has_gpu:
        return ["float8 needs a GPU with float8 tensor cores (SM 8.9+); this run has none"]
    return []


def missing_local(name: str, source: str | None) -> str | None:
    """`source` names a local path (not an s3:// URI, not a hub name) that is not there:
    the problem, in a few words; else None."""
    if source is None or not looks_local(source) or _exists(source):
        return None
    return f"{name} {source!r} does not exist"


# A value with one of these endings names a file, never a hub repo: data/train.jsonl that
# is not on disk is a missing file (trainer/hub.py's is_hub_id reads the same tuple).
FILE_SUFFIXES = (".txt", ".jsonl", ".json", ".parquet", ".safetensors")


def _exists(source: str) -> bool:
    return os.path.exists(os.path.expanduser(source))


def looks_local(source: str) -> bool:
    """A path, not an s3:// URI or a hub name like 'org/name' that is not on disk."""
    if source.startswith("s3://"):
        return False
    return (
        os.path.isabs(source)
        or source.startswith((".", "~"))
        or source.endswith(FILE_SUFFIXES)
        or _exists(source)
    )
