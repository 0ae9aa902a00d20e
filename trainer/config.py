"""The trainer's configuration: one dataclass tree, filled from flat CLI flags.

The flags use the flat names the launcher emits (`--max_steps`, `--seq_len`, ...);
`FLAGS` maps each to its place in the tree. Dashed spellings (`--max-steps`) are
accepted too. Anything invalid raises ConfigError, which the entry point turns into
a JSON error line and exit code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any, NoReturn

from trainer.presets import PRESETS

SHARDING_STRATEGIES = ("full", "shard_grad_op", "hybrid", "no_shard")


class ConfigError(ValueError):
    """The job was configured wrongly; retrying the same flags cannot succeed."""


@dataclass
class ModelConfig:
    dim: int = 128
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    vocab_size: int = 512
    # FFN width: HF's `intermediate_size` when given, else Llama's 8/3*dim rounded
    # up to a multiple of `multiple_of`.
    ffn_hidden_dim: int | None = None
    multiple_of: int = 64
    max_seq_len: int = 512
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def hidden_dim(self) -> int:
        if self.ffn_hidden_dim is not None:
            return self.ffn_hidden_dim
        hidden = int(2 * 4 * self.dim / 3)
        return self.multiple_of * ((hidden + self.multiple_of - 1) // self.multiple_of)


@dataclass
class DataConfig:
    # None = the English corpus bundled in trainer/corpus; else a .txt/.jsonl file or a
    # directory of them.
    path: str | None = None
    seq_len: int = 128


@dataclass
class OptimConfig:
    learning_rate: float = 3e-3
    weight_decay: float = 0.1
    warmup_steps: int = 10
    max_grad_norm: float = 1.0


@dataclass
class ParallelConfig:
    sharding_strategy: str = "full"


@dataclass
class MetricsConfig:
    log_freq: int = 10


@dataclass
class TrainConfig:
    model_type: str = "debug"
    max_steps: int = 200
    train_batch_size: int = 8  # per rank, per step
    seed: int = 0
    output_dir: str | None = None
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# flag -> (dotted path in TrainConfig, type, help). Defaults come from the dataclasses.
FLAGS: dict[str, tuple[str, type, str]] = {
    "model_type": ("model_type", str, f"model preset: {', '.join(PRESETS)}"),
    "max_steps": ("max_steps", int, "optimizer steps to run"),
    "train_batch_size": ("train_batch_size", int, "sequences per rank per step"),
    "seq_len": ("data.seq_len", int, "tokens per training sequence"),
    "learning_rate": ("optim.learning_rate", float, "peak AdamW learning rate"),
    "weight_decay": ("optim.weight_decay", float, "AdamW weight decay (matrices only)"),
    "warmup_steps": ("optim.warmup_steps", int, "linear warmup steps before cosine decay"),
    "max_grad_norm": ("optim.max_grad_norm", float, "gradient clipping norm (0 = off)"),
    "seed": ("seed", int, "seed for model init and data order"),
    "log_freq": ("metrics.log_freq", int, "emit a step line every N steps"),
    "sharding_strategy": (
        "parallel.sharding_strategy",
        str,
        f"FSDP strategy: {'|'.join(SHARDING_STRATEGIES)}",
    ),
    "output_dir": ("output_dir", str, "where the run writes its files (config.json)"),
    "dataset": (
        "data.path",
        str,
        "text dataset, a .txt/.jsonl file or a directory; None = bundled",
    ),
}


class _Parser(argparse.ArgumentParser):
    # argparse prints usage and exits 2 on its own; we need a JSON error line instead.
    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)


def _get(cfg: Any, path: str) -> Any:
    for part in path.split("."):
        cfg = getattr(cfg, part)
    return cfg


def _set(cfg: Any, path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for part in parents:
        cfg = getattr(cfg, part)
    setattr(cfg, leaf, value)


def build_parser() -> argparse.ArgumentParser:
    defaults = TrainConfig()
    # allow_abbrev=False: `--max 5` must be an unknown flag, not a guess at --max_steps.
    parser = _Parser(
        prog="python -m trainer", description="Minimal FSDP2 Llama trainer.", allow_abbrev=False
    )
    for name, (path, typ, help_text) in FLAGS.items():
        spellings = [f"--{name}"]
        if "_" in name:
            spellings.append(f"--{name.replace('_', '-')}")
        parser.add_argument(
            *spellings,
            dest=name,
            type=typ,
            metavar={int: "N", float: "X"}.get(typ, "STR"),
            default=argparse.SUPPRESS,  # only flags actually given override the tree
            help=f"{help_text} (default: {_get(defaults, path)})",
        )
    return parser


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    """Flags -> validated TrainConfig. Raises ConfigError."""
    given = vars(build_parser().parse_args(argv))
    cfg = TrainConfig()
    for name, value in given.items():
        _set(cfg, FLAGS[name][0], value)
    if cfg.model_type not in PRESETS:
        raise ConfigError(
            f"unknown model_type {cfg.model_type!r}; choose one of {', '.join(PRESETS)}"
        )
    cfg.model = ModelConfig(**PRESETS[cfg.model_type])
    validate(cfg)
    return cfg


def validate(cfg: TrainConfig) -> None:
    """Check every rule and report all violations at once."""
    problems: list[str] = []

    def need(ok: bool, msg: str) -> None:
        if not ok:
            problems.append(msg)

    m = cfg.model
    need(cfg.max_steps >= 1, "max_steps must be >= 1")
    need(cfg.train_batch_size >= 1, "train_batch_size must be >= 1")
    need(cfg.data.seq_len >= 1, "seq_len must be >= 1")
    need(
        cfg.data.seq_len <= m.max_seq_len,
        f"seq_len {cfg.data.seq_len} exceeds max_seq_len {m.max_seq_len} of {cfg.model_type}",
    )
    need(cfg.optim.learning_rate > 0, "learning_rate must be > 0")
    need(cfg.optim.weight_decay >= 0, "weight_decay must be >= 0")
    need(cfg.optim.warmup_steps >= 0, "warmup_steps must be >= 0")
    need(cfg.optim.max_grad_norm >= 0, "max_grad_norm must be >= 0")
    need(cfg.metrics.log_freq >= 1, "log_freq must be >= 1")
    need(
        cfg.parallel.sharding_strategy in SHARDING_STRATEGIES,
        f"unknown sharding_strategy {cfg.parallel.sharding_strategy!r}; "
        f"choose one of {', '.join(SHARDING_STRATEGIES)}",
    )
    need(m.dim % m.n_heads == 0, "dim must be divisible by n_heads")
    need(m.n_heads % m.n_kv_heads == 0, "n_heads must be divisible by n_kv_heads")
    need(m.head_dim % 2 == 0, "head_dim must be even for RoPE")
    if cfg.data.path is not None:
        need(os.path.exists(cfg.data.path), f"dataset {cfg.data.path!r} does not exist")
    if problems:
        raise ConfigError("; ".join(problems))
