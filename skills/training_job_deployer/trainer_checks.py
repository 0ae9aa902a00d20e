"""The trainer's own start-up checks, run when a job is planned: what the trainer would
refuse in every pod 20 s after the submit (a missing local dataset or tokenizer, a
seq_len above the model's limit, a rule across settings, a bad TRAINER_* variable) is
refused by the dry run and the submit alike, on every target.

The rules are the trainer's, not a copy: its config loader and `validate` import no
torch (trainer/config.py, config_loader.py, hf_config.py). What needs the job's own
host (a path on a cluster, an s3:// or hub checkpoint's config.json) is left to the
trainer at start."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.paths import absolute
from skills.shared.reading import load_json
from skills.training_job_deployer.job_spec import JobSpec, trainer_argv
from trainer.config import ConfigError, device_problems, looks_local, missing_local
from trainer.config_loader import ENV_PREFIX, load_config
from trainer.hf_config import max_positions

# The longest seq_len a JobSpec takes: the limit used where the model's own is unknown
# before the job starts (its config.json is on s3://, the hub or the cluster).
UNKNOWN_LIMIT = 2**20


def here(source: str | None, runs_here: bool) -> str | None:
    """A local path of the job as this host sees it: under the caller's project (an MCP
    session's workspace, else the cwd) when relative; anything else as it is."""
    if source is None or not runs_here or not looks_local(source):
        return source
    return str(absolute(source))


def model_limit(spec: JobSpec, runs_here: bool) -> int | None:
    """The longest sequence the job's checkpoint allows, from its config.json when that
    is a local directory here (None: a preset's, which the trainer's presets give)."""
    source = here(spec.model_name_or_path, runs_here)
    if source is None:
        return None
    config = Path(source).expanduser() / "config.json"
    if not runs_here or not config.is_file():
        return UNKNOWN_LIMIT
    try:
        hf = load_json(config, what="model config", max_bytes=1 << 20)
    except ToolFailure:
        return UNKNOWN_LIMIT  # the trainer says what is wrong with it at start
    return (max_positions(hf) if isinstance(hf, dict) else None) or UNKNOWN_LIMIT


def trainer_problems(
    spec: JobSpec,
    runs_here: bool,
    environ: Mapping[str, str] | None = None,
    gpus: int | None = None,
) -> list[str]:
    """What the trainer's start-up checks refuse in this job, as the trainer says it
    (empty: nothing). `runs_here`: the job's paths are this host's; `environ`: the
    environment the job inherits here (its TRAINER_* variables are settings too);
    `gpus`: the GPUs each of its hosts has, when the plan knows (None: unknown)."""
    problems: list[str] = []
    checkpoint = here(spec.model_name_or_path, runs_here)
    if runs_here and (problem := missing_local("model_name_or_path", checkpoint)):
        problems.append(problem)
    # The model's shape is the preset's, or only its limit where a checkpoint gives it.
    update: dict[str, object] = {"model_name_or_path": None}
    if spec.model_name_or_path is not None:  # any preset stands in for its shape
        update["model_type"] = "debug"
    for name in ("dataset", "tokenizer"):  # checked as this host sees them, or not at all
        update[name] = here(getattr(spec, name), runs_here) if runs_here else None
    argv = trainer_argv(spec.model_copy(update=update))
    limit = model_limit(spec, runs_here)
    if limit is not None:
        argv += ["--max_seq_len", str(limit)]
    inherited = {k: v for k, v in (environ or {}).items() if k.startswith(ENV_PREFIX)}
    try:
        cfg = load_config(argv, environ={**inherited, **spec.env})
    except ConfigError as exc:
        return [*problems, str(exc)]
    return problems + (device_problems(cfg, gpus > 0) if gpus is not None else [])


def check_trainer_config(spec: JobSpec, runs_here: bool, gpus: int | None = None) -> None:
    """invalid_input, with the trainer's own words, when the trainer would refuse this
    job at start (`gpus`: per host, when the caller knows them)."""
    problems = trainer_problems(spec, runs_here, os.environ if runs_here else None, gpus)
    if problems:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"The trainer would refuse this job at start: {'; '.join(problems)}.",
            "Fix the named settings (a path relative to the project, a seq_len within the "
            "model's max_position_embeddings) and plan again.",
            {"problems": [{"field": "job", "problem": p} for p in problems]},
        )
