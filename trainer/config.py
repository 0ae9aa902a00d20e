"""The trainer's configuration: one dataclass tree, filled from four layers.

    dataclass defaults < model preset (or an HF checkpoint's config.json)
        < YAML file (--config) < environment (TRAINER_<FLAG>) < CLI flags

Every setting has one flat flag name (`--max_steps`, `--checkpoint_freq`, ...), the
names the launcher emits; `FLAGS` maps each to its place in the tree. A YAML file may
use the tree (`optim: {learning_rate: 1e-3}`) or the flat names. Unknown keys in any
layer are an error. Anything invalid raises ConfigError, which the entry point turns
into a JSON error line and exit code 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NoReturn

from trainer.presets import PRESETS

SHARDING_STRATEGIES = ("full", "shard_grad_op", "hybrid", "no_shard")
AC_MODES = ("none", "selective", "full")
ENV_PREFIX = "TRAINER_"


class ConfigError(ValueError):
    """The job was configured wrongly; retrying the same flags cannot succeed."""


@dataclass
class RopeScaling:
    """Llama-3.1 RoPE frequency scaling (HF `rope_scaling` with rope_type "llama3")."""

    factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


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
    rope_scaling: RopeScaling | None = None
    norm_eps: float = 1e-5
    tie_word_embeddings: bool = False

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
    # None = the English corpus bundled in trainer/corpus. Else a .txt/.jsonl file or
    # directory, an s3:// URI of either, or a Hugging Face hub dataset name.
    dataset: str | None = None
    dataset_config_name: str | None = None
    # None = the byte-level tokenizer; else a tokenizer.json, a directory holding one,
    # an s3:// URI of either, or a hub model name.
    tokenizer: str | None = None
    seq_len: int = 128
    # Share of the token stream held out for evaluation (taken from its end).
    validation_split: float = 0.05


@dataclass
class OptimConfig:
    learning_rate: float = 3e-3
    weight_decay: float = 0.1
    warmup_steps: int = 10
    max_grad_norm: float = 1.0
    grad_accum_steps: int = 1


@dataclass
class ParallelConfig:
    sharding_strategy: str = "full"
    activation_checkpointing: str = "none"
    compile: bool = False
    cpu_offload: bool = False


@dataclass
class CheckpointConfig:
    # None = no checkpoints. A local dir (hostPath, PVC, FSx) or an s3:// URI.
    checkpoint_dir: str | None = None
    checkpoint_freq: int = 100  # steps; the last step and SIGTERM always save
    keep_last: int = 2
    async_save: bool = False
    resume: bool = True


@dataclass
class MetricsConfig:
    log_freq: int = 10
    validation_freq: int = 50  # 0 = no evaluation
    validation_batches: int = 4  # per rank, per evaluation


@dataclass
class TrainConfig:
    model_type: str = "debug"
    # An HF Llama checkpoint directory (local or s3://) to fine-tune from.
    model_name_or_path: str | None = None
    max_steps: int = 200
    train_batch_size: int = 8  # per rank, per micro-batch
    seed: int = 0
    output_dir: str | None = None
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _bool(text: str) -> bool:
    lowered = str(text).strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


_bool.__name__ = "bool"  # argparse names the type in its error message

# flag -> (dotted path in TrainConfig, type, help). Defaults come from the dataclasses.
FLAGS: dict[str, tuple[str, Any, str]] = {
    "model_type": ("model_type", str, f"model preset: {', '.join(PRESETS)}"),
    "model_name_or_path": (
        "model_name_or_path",
        str,
        "HF Llama checkpoint dir (local or s3://) to start from",
    ),
    "max_steps": ("max_steps", int, "optimizer steps to run"),
    "train_batch_size": ("train_batch_size", int, "sequences per rank per micro-batch"),
    "seed": ("seed", int, "seed for model init and data order"),
    "output_dir": ("output_dir", str, "where the run writes its files (config.json)"),
    # model dimensions: override the preset's
    "dim": ("model.dim", int, "hidden size"),
    "n_layers": ("model.n_layers", int, "transformer blocks"),
    "n_heads": ("model.n_heads", int, "attention heads"),
    "n_kv_heads": ("model.n_kv_heads", int, "key/value heads (GQA)"),
    "vocab_size": ("model.vocab_size", int, "embedding rows"),
    "ffn_hidden_dim": ("model.ffn_hidden_dim", int, "SwiGLU inner width"),
    "max_seq_len": ("model.max_seq_len", int, "longest supported sequence"),
    "rope_theta": ("model.rope_theta", float, "RoPE base"),
    "norm_eps": ("model.norm_eps", float, "RMSNorm epsilon"),
    "tie_word_embeddings": ("model.tie_word_embeddings", _bool, "share embedding and lm_head"),
    # data
    "dataset": ("data.dataset", str, "file/dir, s3:// URI or HF hub dataset; None = bundled"),
    "dataset_config_name": ("data.dataset_config_name", str, "HF hub dataset config"),
    "tokenizer": ("data.tokenizer", str, "tokenizer.json path/dir, s3:// or hub name"),
    "seq_len": ("data.seq_len", int, "tokens per training sequence"),
    "validation_split": ("data.validation_split", float, "share of tokens held out for eval"),
    # optimizer
    "learning_rate": ("optim.learning_rate", float, "peak AdamW learning rate"),
    "weight_decay": ("optim.weight_decay", float, "AdamW weight decay (matrices only)"),
    "warmup_steps": ("optim.warmup_steps", int, "linear warmup steps before cosine decay"),
    "max_grad_norm": ("optim.max_grad_norm", float, "gradient clipping norm (0 = off)"),
    "grad_accum_steps": ("optim.grad_accum_steps", int, "micro-batches per optimizer step"),
    # parallelism
    "sharding_strategy": (
        "parallel.sharding_strategy",
        str,
        f"FSDP strategy: {'|'.join(SHARDING_STRATEGIES)}",
    ),
    "activation_checkpointing": (
        "parallel.activation_checkpointing",
        str,
        f"recompute activations in backward: {'|'.join(AC_MODES)}",
    ),
    "compile": ("parallel.compile", _bool, "torch.compile each transformer block"),
    "cpu_offload": ("parallel.cpu_offload", _bool, "keep params/grads/optimizer state on CPU"),
    # checkpoints
    "checkpoint_dir": ("checkpoint.checkpoint_dir", str, "local dir or s3:// URI; None = off"),
    "checkpoint_freq": ("checkpoint.checkpoint_freq", int, "save every N steps (0 = end only)"),
    "keep_last": ("checkpoint.keep_last", int, "complete checkpoints to keep (0 = all)"),
    "async_save": ("checkpoint.async_save", _bool, "write checkpoints while training goes on"),
    "resume": ("checkpoint.resume", _bool, "resume from the newest complete checkpoint"),
    # metrics
    "log_freq": ("metrics.log_freq", int, "emit a step line every N steps"),
    "validation_freq": ("metrics.validation_freq", int, "evaluate every N steps (0 = off)"),
    "validation_batches": ("metrics.validation_batches", int, "eval batches per rank"),
}
_PATH_TO_FLAG = {path: name for name, (path, _, _) in FLAGS.items()}
SECTIONS = ("model", "data", "optim", "parallel", "checkpoint", "metrics")


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
        prog="python -m trainer",
        description="FSDP2 Llama trainer. Settings come from flags, --config YAML and "
        f"{ENV_PREFIX}<FLAG> environment variables (flags win).",
        allow_abbrev=False,
    )
    parser.add_argument("--config", metavar="YAML", help="YAML file of settings")
    for name, (path, typ, help_text) in FLAGS.items():
        spellings = [f"--{name}"]
        if "_" in name:
            spellings.append(f"--{name.replace('_', '-')}")
        extra: dict[str, Any] = {"nargs": "?", "const": True} if typ is _bool else {}
        parser.add_argument(
            *spellings,
            dest=name,
            type=typ,
            metavar={int: "N", float: "X", _bool: "BOOL"}.get(typ, "STR"),
            default=argparse.SUPPRESS,  # only flags actually given override the tree
            help=f"{help_text} (default: {_get(defaults, path)})",
            **extra,
        )
    return parser


def _unknown(key: str, known: list[str], where: str) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    return f"unknown key {key!r} in {where}" + (f" (did you mean {close[0]!r}?)" if close else "")


def _coerce(name: str, value: Any, where: str) -> Any:
    """A YAML/env value -> the flag's type; None stays None (means: the default)."""
    typ = FLAGS[name][1]
    if value is None:
        return None
    if typ is _bool and isinstance(value, bool):
        return value
    if typ is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if typ is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return typ(str(value))
    except ValueError as exc:
        raise ConfigError(f"{name} in {where}: {exc}") from exc


def yaml_settings(text: str, where: str) -> dict[str, Any]:
    """A YAML document -> {flag: value}; sections follow the tree, flat names work too."""
    import yaml

    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where} is not valid YAML: {exc}") from exc
    if not isinstance(doc, Mapping):
        raise ConfigError(f"{where} must be a mapping of settings")
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if key in SECTIONS and isinstance(value, Mapping):
            for sub, subvalue in value.items():
                path = f"{key}.{sub}"
                if path == "model.rope_scaling":
                    out["rope_scaling"] = subvalue
                    continue
                if path not in _PATH_TO_FLAG:
                    known = [p.split(".", 1)[1] for p in _PATH_TO_FLAG if p.startswith(key + ".")]
                    raise ConfigError(_unknown(str(sub), known, f"{where} section {key!r}"))
                name = _PATH_TO_FLAG[path]
                out[name] = _coerce(name, subvalue, where)
        elif key in FLAGS:
            out[key] = _coerce(key, value, where)
        else:
            raise ConfigError(_unknown(str(key), [*FLAGS, *SECTIONS], where))
    return out


def env_settings(environ: Mapping[str, str]) -> dict[str, Any]:
    """TRAINER_MAX_STEPS=5 -> {"max_steps": 5}; an unknown TRAINER_* name is an error."""
    out: dict[str, Any] = {}
    for var, value in environ.items():
        if not var.startswith(ENV_PREFIX):
            continue
        name = var[len(ENV_PREFIX) :].lower()
        if name not in FLAGS:
            known = [ENV_PREFIX + n.upper() for n in FLAGS]
            raise ConfigError(_unknown(var, known, "the environment"))
        out[name] = _coerce(name, value, f"${var}")
    return out


def base_model(cfg: TrainConfig) -> ModelConfig:
    """The model before overrides: an HF checkpoint's config.json, else the preset."""
    if cfg.model_name_or_path:
        from trainer import hf  # deferred: may fetch config.json from S3

        return hf.read_model_config(cfg.model_name_or_path)
    if cfg.model_type not in PRESETS:
        raise ConfigError(
            f"unknown model_type {cfg.model_type!r}; choose one of {', '.join(PRESETS)}"
        )
    preset = dict(PRESETS[cfg.model_type])
    if preset.get("rope_scaling") is not None:
        preset["rope_scaling"] = RopeScaling(**preset["rope_scaling"])
    return ModelConfig(**preset)


def load_config(
    argv: list[str] | None = None, environ: Mapping[str, str] | None = None
) -> TrainConfig:
    """Flags + YAML + environment -> validated TrainConfig. Raises ConfigError."""
    given = vars(build_parser().parse_args(argv))
    config_file = given.pop("config", None)
    settings: dict[str, Any] = {}
    if config_file:
        try:
            with open(config_file, encoding="utf-8") as fh:
                settings.update(yaml_settings(fh.read(), config_file))
        except OSError as exc:
            raise ConfigError(f"cannot read --config {config_file}: {exc.strerror}") from exc
    settings.update(env_settings(os.environ if environ is None else environ))
    settings.update(given)

    cfg = TrainConfig()
    rope_scaling = settings.pop("rope_scaling", "unset")
    model_settings = {k: v for k, v in settings.items() if FLAGS[k][0].startswith("model.")}
    for name, value in settings.items():
        if name not in model_settings:
            _set(cfg, FLAGS[name][0], value)
    cfg.model = base_model(cfg)
    for name, value in model_settings.items():
        _set(cfg, FLAGS[name][0], value)
    if rope_scaling != "unset":
        try:
            cfg.model.rope_scaling = RopeScaling(**rope_scaling) if rope_scaling else None
        except TypeError as exc:
            raise ConfigError(f"model.rope_scaling: {exc}") from exc
    validate(cfg)
    return cfg


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    """CLI flags (plus --config and TRAINER_* variables) -> TrainConfig."""
    return load_config(argv)


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
        f"seq_len {cfg.data.seq_len} exceeds max_seq_len {m.max_seq_len} of the model",
    )
    need(0 <= cfg.data.validation_split < 1, "validation_split must be in [0, 1)")
    need(cfg.optim.learning_rate > 0, "learning_rate must be > 0")
    need(cfg.optim.weight_decay >= 0, "weight_decay must be >= 0")
    need(cfg.optim.warmup_steps >= 0, "warmup_steps must be >= 0")
    need(cfg.optim.max_grad_norm >= 0, "max_grad_norm must be >= 0")
    need(cfg.optim.grad_accum_steps >= 1, "grad_accum_steps must be >= 1")
    need(cfg.metrics.log_freq >= 1, "log_freq must be >= 1")
    need(cfg.metrics.validation_freq >= 0, "validation_freq must be >= 0")
    need(cfg.metrics.validation_batches >= 1, "validation_batches must be >= 1")
    need(cfg.checkpoint.checkpoint_freq >= 0, "checkpoint_freq must be >= 0")
    need(cfg.checkpoint.keep_last >= 0, "keep_last must be >= 0")
    need(
        cfg.parallel.sharding_strategy in SHARDING_STRATEGIES,
        f"unknown sharding_strategy {cfg.parallel.sharding_strategy!r}; "
        f"choose one of {', '.join(SHARDING_STRATEGIES)}",
    )
    need(
        cfg.parallel.activation_checkpointing in AC_MODES,
        f"unknown activation_checkpointing {cfg.parallel.activation_checkpointing!r}; "
        f"choose one of {', '.join(AC_MODES)}",
    )
    for name in ("dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "max_seq_len"):
        need(getattr(m, name) >= 1, f"{name} must be >= 1")
    if m.n_heads >= 1 and m.n_kv_heads >= 1:
        need(m.dim % m.n_heads == 0, "dim must be divisible by n_heads")
        need(m.n_heads % m.n_kv_heads == 0, "n_heads must be divisible by n_kv_heads")
        need(m.head_dim % 2 == 0, "head_dim must be even for RoPE")
    dataset = cfg.data.dataset
    if dataset is not None and _looks_local(dataset):
        need(os.path.exists(dataset), f"dataset {dataset!r} does not exist")
    if problems:
        raise ConfigError("; ".join(problems))


def _looks_local(source: str) -> bool:
    """A path, not an s3:// URI or a hub name like 'org/name' that is not on disk."""
    if source.startswith("s3://"):
        return False
    return os.path.isabs(source) or source.startswith(".") or os.path.exists(source)
