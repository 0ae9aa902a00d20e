"""Filling the config tree from four layers:

    dataclass defaults < model preset (or an HF checkpoint's config.json)
        < YAML file (--config) < environment (TRAINER_<FLAG>) < CLI flags

Every flag has one flat name (`--max_steps`, `--checkpoint_freq`, ...), the names the
launcher emits; config.flag_table() maps each to its place in the tree. A YAML file
may use the tree (`optim: {learning_rate: 1e-3}`) or the flat names. Unknown keys in
any layer are an error. Anything invalid raises ConfigError, which the entry point
turns into a JSON error line and exit code 2.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import os
from collections.abc import Mapping
from typing import Any, NoReturn

from trainer import hf_config
from trainer.config import (
    SECTIONS,
    ConfigError,
    ModelConfig,
    RopeScaling,
    TrainConfig,
    flag_table,
    get_path,
    set_path,
    validate,
)
from trainer.presets import PRESETS, preset_name, unknown_model_type
from trainer.rules import sharding_spelling

ENV_PREFIX = "TRAINER_"


def parse_bool(text: str) -> bool:
    lowered = str(text).strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true or false, got {text!r}")


parse_bool.__name__ = "bool"  # argparse names the type in its error message
# A flag's type -> what turns its text into a value, and the placeholder in --help.
_PARSERS: dict[type, tuple[Any, str]] = {
    int: (int, "N"),
    float: (float, "X"),
    str: (str, "STR"),
    bool: (parse_bool, "BOOL"),
}


class _Parser(argparse.ArgumentParser):
    # argparse prints usage and exits 2 on its own; we need a JSON error line instead.
    def error(self, message: str) -> NoReturn:
        raise ConfigError(message)


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
    for name, flag in flag_table().items():
        spellings = [f"--{name}"]
        if "_" in name:
            spellings.append(f"--{name.replace('_', '-')}")
        convert, metavar = _PARSERS[flag.type]
        extra: dict[str, Any] = {"nargs": "?", "const": True} if flag.type is bool else {}
        parser.add_argument(
            *spellings,
            dest=name,
            type=convert,
            metavar=metavar,
            default=argparse.SUPPRESS,  # only flags actually given override the tree
            help=f"{flag.rules.help} (default: {get_path(defaults, flag.path)})",
            **extra,
        )
    return parser


def _unknown(key: str, known: list[str], where: str) -> str:
    close = difflib.get_close_matches(key, known, n=1)
    return f"unknown key {key!r} in {where}" + (f" (did you mean {close[0]!r}?)" if close else "")


def _coerce(name: str, value: Any, where: str) -> Any:
    """A YAML/env value -> the flag's type; None stays None (means: the default)."""
    typ = flag_table()[name].type
    if value is None:
        return None
    if typ is bool and isinstance(value, bool):
        return value
    if typ is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if typ is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return _PARSERS[typ][0](str(value))
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
    by_path = {flag.path: name for name, flag in flag_table().items()}
    out: dict[str, Any] = {}
    for key, value in doc.items():
        if key in SECTIONS and isinstance(value, Mapping):
            for sub, subvalue in value.items():
                path = f"{key}.{sub}"
                if path == "model.rope_scaling":
                    out["rope_scaling"] = subvalue
                    continue
                if path not in by_path:
                    known = [p.split(".", 1)[1] for p in by_path if p.startswith(key + ".")]
                    raise ConfigError(_unknown(str(sub), known, f"{where} section {key!r}"))
                out[by_path[path]] = _coerce(by_path[path], subvalue, where)
        elif key in flag_table():
            out[key] = _coerce(key, value, where)
        else:
            raise ConfigError(_unknown(str(key), [*flag_table(), *SECTIONS], where))
    return out


def env_settings(environ: Mapping[str, str]) -> dict[str, Any]:
    """TRAINER_MAX_STEPS=5 -> {"max_steps": 5}; an unknown TRAINER_* name is an error."""
    out: dict[str, Any] = {}
    for var, value in environ.items():
        if not var.startswith(ENV_PREFIX):
            continue
        name = var[len(ENV_PREFIX) :].lower()
        if name not in flag_table():
            known = [ENV_PREFIX + n.upper() for n in flag_table()]
            raise ConfigError(_unknown(var, known, "the environment"))
        out[name] = _coerce(name, value, f"${var}")
    return out


def base_model(cfg: TrainConfig) -> ModelConfig:
    """The model before overrides: an HF checkpoint's config.json, else the preset."""
    if cfg.model_name_or_path:
        return hf_config.read_model_config(cfg.model_name_or_path, cfg.trust_remote_code)
    name = preset_name(cfg.model_type)
    if name is None:
        raise ConfigError(unknown_model_type(cfg.model_type))
    preset = copy.deepcopy(PRESETS[name])  # its hf_config is the run's own to keep
    if preset.get("rope_scaling") is not None:
        preset["rope_scaling"] = RopeScaling(**preset["rope_scaling"])
    return ModelConfig(**preset)


def _layered_settings(argv: list[str] | None, environ: Mapping[str, str]) -> dict[str, Any]:
    """{flag: value} of the YAML file, the environment and the flags, later ones winning."""
    given = vars(build_parser().parse_args(argv))
    config_file = given.pop("config", None)
    settings: dict[str, Any] = {}
    if config_file:
        try:
            with open(config_file, encoding="utf-8") as fh:
                settings.update(yaml_settings(fh.read(), config_file))
        except OSError as exc:
            raise ConfigError(f"cannot read --config {config_file}: {exc.strerror}") from exc
    settings.update(env_settings(environ))
    settings.update(given)
    return settings


def load_config(
    argv: list[str] | None = None, environ: Mapping[str, str] | None = None
) -> TrainConfig:
    """Flags + YAML + environment -> validated TrainConfig. Raises ConfigError."""
    settings = _layered_settings(argv, os.environ if environ is None else environ)
    if isinstance(strategy := settings.get("sharding_strategy"), str):
        settings["sharding_strategy"] = sharding_spelling(strategy)
    table = flag_table()
    cfg = TrainConfig()
    rope_scaling = settings.pop("rope_scaling", "unset")
    model_settings = {k: v for k, v in settings.items() if table[k].path.startswith("model.")}
    for name, value in settings.items():
        if name not in model_settings:
            set_path(cfg, table[name].path, value)
    # The model section's base depends on model_type/model_name_or_path, set just above.
    cfg.model = base_model(cfg)
    if cfg.model.hf_config is not None and model_settings:
        raise ConfigError(
            f"--{', --'.join(model_settings)}: shape flags apply to presets and Llama "
            f"checkpoints; a {cfg.model.hf_config.get('model_type')} checkpoint's shape is "
            "its config.json's"
        )
    # An alias (llama_v3) is logged and checkpointed as the preset it names.
    cfg.model_type = preset_name(cfg.model_type) or cfg.model_type
    for name, value in model_settings.items():
        set_path(cfg, table[name].path, value)
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
