"""What a job's `env` (`--env KEY=VALUE`, MCP `env`) may set: an allow-list of the
documented knobs of what the job runs, checked at the edge for every target.

- Families, every name under the prefix: NCCL_* (NCCL), FI_* (libfabric and its EFA
  provider), OFI_NCCL_* (the aws-ofi-nccl plugin), TORCH_NCCL_* (torch's NCCL process
  group) and TRAINER_<FLAG> (the trainer's flags that JobSpec has no field for; the
  trainer refuses a name it does not know).
- Single names (KNOBS): torch's logging and allocator, OpenMP's threads, CUDA's runtime
  switches, the hub client's switches.
- Nothing in env takes a path or loads code: a name that says it takes one (NAME_SHAPES:
  NCCL_DEBUG_FILE, FI_PROVIDER_PATH, NCCL_NET_PLUGIN, TRAINER_OUTPUT_DIR) is refused
  within its family, and so is any value with a '/' (a path knob whose name does not
  say so). Each target puts the job's files itself (run directory, TMPDIR, HF_HOME on
  the checkpoint volume); a local or Slurm job inherits the user's own HF_HOME.
- No endpoint, proxy or CA bundle: a credential goes only where the user's own
  environment sends it. A hub mirror is HF_ENDPOINT in the environment the tools run
  in (a local or Slurm job inherits it; the Kubernetes target copies it beside the
  token's Secret), never a tool argument.
- Secrets never (env is written into manifests, batch scripts and records: HF_TOKEN
  reaches a job from the caller's environment, through a Secret on a cluster), nor the
  launcher's own per-rank variables (a job's value would break the rendezvous).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.secrets import is_secret_name
from skills.training_job_deployer.tracking_env import ENDPOINTS

# Variables the launcher itself sets for each rank: refused rather than silently overridden.
LAUNCHER_ENV = frozenset(
    {
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "ROLE_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHELASTIC_RUN_ID",
        "CUDA_VISIBLE_DEVICES",
    }
)
LAUNCHER_ENV_PREFIXES = ("PET_", "TORCHELASTIC_", "SLURM_")
# Checked here, not by schema patterns: the same rule without bytes in every tools/list.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_ENV_VALUE = re.compile(r"[^\x00-\x1f]{0,4096}")

# Prefix -> whose documented knobs they are.
FAMILIES = {
    "NCCL_": "NCCL",
    "FI_": "libfabric / EFA",
    "OFI_NCCL_": "aws-ofi-nccl",
    "TORCH_NCCL_": "torch's NCCL process group",
    "TRAINER_": "the trainer's flags (TRAINER_<FLAG>: python -m trainer --help)",
}
KNOBS = frozenset(
    {
        # torch: distributed debugging, C++ logs, log artifacts, the CUDA caching allocator
        "TORCH_DISTRIBUTED_DEBUG",
        "TORCH_CPP_LOG_LEVEL",
        "TORCH_SHOW_CPP_STACKTRACES",
        "TORCH_LOGS",
        "PYTORCH_CUDA_ALLOC_CONF",
        "PYTORCH_ALLOC_CONF",
        "PYTORCH_NO_CUDA_MEMORY_CACHING",
        # OpenMP and the CUDA runtime
        "OMP_NUM_THREADS",
        "CUDA_LAUNCH_BLOCKING",
        "CUDA_DEVICE_MAX_CONNECTIONS",
        "CUDA_MODULE_LOADING",
        # the hub client's switches (never its endpoint, token or cache)
        "HF_HUB_OFFLINE",
        "HF_HUB_DISABLE_XET",
        "HF_HUB_DISABLE_TELEMETRY",
        "HF_HUB_DISABLE_PROGRESS_BARS",
        "HF_HUB_DOWNLOAD_TIMEOUT",
        "HF_HUB_ETAG_TIMEOUT",
    }
)
# How a knob that takes a path, or names code to load, is spelled (NCCL_TOPO_FILE,
# TORCH_NCCL_DEBUG_INFO_TEMP_FILE, FI_PROVIDER_PATH, NCCL_TUNER_PLUGIN,
# OFI_NCCL_TOPO_FILE_TEMPLATE, ...).
NAME_SHAPES = (
    "_FILE",
    "_DIR",
    "_PATH",
    "_HOME",
    "_CACHE",
    "_PLUGIN",
    "_LIB",
    "_LIBRARY",
    "_LIBRARIES",
    "_BUNDLE",
    "_TEMPLATE",
)
# Trainer flags that load code whatever their value.
CODE_FLAGS = frozenset({"TRAINER_TRUST_REMOTE_CODE"})
KNOBS_DOC = "docs/skills/training_job_deployer.md, 'A job's env'"
ENV_HINT = (
    "env takes documented knobs only: "
    + ", ".join(f"{prefix}*" for prefix in FAMILIES)
    + ", "
    + ", ".join(sorted(KNOBS))
    + f" ({KNOBS_DOC}); none that takes a path or loads code. A hub mirror (HF_ENDPOINT), "
    "a proxy, a CA bundle or a cache directory is set in the environment the tools run "
    "in, never through env."
)


def knob_problem(name: str, value: str, own_fields: Iterable[str]) -> str | None:
    """Why `name=value` may not be in a job's env (None: it may). `own_fields` are the
    JobSpec fields: a trainer flag with one is set there, where it is validated."""
    family = next((p for p in FAMILIES if name.startswith(p)), None)
    if family is None and name not in KNOBS:
        return f"{name} is not a documented knob of NCCL, libfabric, torch or the trainer"
    if name.endswith(NAME_SHAPES) or name in CODE_FLAGS:
        return f"{name} takes a path or loads code"
    if family == "TRAINER_" and name.removeprefix(family).lower() in own_fields:
        return f"{name} is the field {name.removeprefix(family).lower()}: set that instead"
    if "/" in value:
        return f"the value of {name} is a path"
    return None


def env_problem(name: str, value: str, own_fields: Iterable[str]) -> str | None:
    """Why `name=value` may not be in a job's env (None: it may), never echoing a value."""
    if not _ENV_NAME.fullmatch(name):
        return f"{name[:64]!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)"
    if not _ENV_VALUE.fullmatch(value):
        return f"the value of {name} has a control character or is too long"
    if is_secret_name(name):
        return (
            f"{name} names a secret: export it where the job runs (HF_TOKEN goes through "
            "a Kubernetes Secret)"
        )
    if name in ENDPOINTS:
        return (
            f"{name} is an endpoint: set it in the environment the tools run in (a job "
            "inherits it; the Kubernetes target copies it), never through env"
        )
    if name in LAUNCHER_ENV or name.startswith(LAUNCHER_ENV_PREFIXES):
        return f"{name} is set by the launcher for each rank"
    return knob_problem(name, value, own_fields)


def checked_env(env: dict[str, str], own_fields: Iterable[str]) -> dict[str, str]:
    """`env` when every variable may be set; else the tool's invalid_input error naming
    each refused variable (never a value), its hint where the knobs are listed. Raised
    as the tool's error, not a ValueError, so the refusal keeps its own hint."""
    fields = frozenset(own_fields)
    problems = [
        {"field": f"env.{name}", "problem": problem}
        for name, value in env.items()
        if (problem := env_problem(name, value, fields)) is not None
    ]
    if problems:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            "env: " + "; ".join(p["problem"] for p in problems) + ".",
            ENV_HINT,
            {"field": "env", "problems": problems},
        )
    return env
