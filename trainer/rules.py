"""The trainer's rules that the tools apply when they plan a job, declared once.

Torch-free (standard library only), so the tools (skills/, commands/, mcp_server/)
import these instead of keeping copies: the sharding strategies and the spellings other
documents use for them, which strategy `auto` runs, the bytes of training state a
parameter costs, and the exit codes a job's supervisor reads. The contract "The tools
import only the trainer's torch-free modules" (pyproject.toml) and
tests/unit/test_trainer_rules.py keep it so.
"""

from __future__ import annotations

from typing import Literal, get_args

ShardingStrategy = Literal["auto", "full", "shard_grad_op", "hybrid", "no_shard"]
SHARDING_STRATEGIES: tuple[str, ...] = get_args(ShardingStrategy)
# Other documents' spellings (the FSDP-on-EKS document's `shard`; FSDP1's
# ShardingStrategy names, upper case) -> ours. Read case-insensitively.
SHARDING_SPELLINGS = {"shard": "full", "full_shard": "full", "hybrid_shard": "hybrid"}

# Training state a parameter costs: fp32 weight and gradient, AdamW's two fp32 moments.
STATE_BYTES_PER_PARAM = 16

EXIT_FAILURE = 1
EXIT_CONFIG = 2
# SIGTERM handled: a checkpoint was saved. 128 + SIGTERM, the code Kubernetes and the
# Kubeflow ExitCode restart policy treat as retryable; distinct from the -15 of a
# process that was killed by the signal without saving.
EXIT_PREEMPTED = 143


def sharding_spelling(value: str) -> str:
    """The trainer's name for a strategy written another way (`FULL_SHARD` -> `full`);
    any other value lower-cased, for the validator to accept or refuse."""
    key = value.strip().lower()
    return SHARDING_SPELLINGS.get(key, key)


def resolve_strategy(
    strategy: str,
    world_size: int,
    local_world_size: int,
    n_params: int = 0,
    gpu_bytes: int | None = None,
) -> str:
    """`auto`: hybrid when the job spans more than one node (flat FSDP across nodes
    sends every all-gather and reduce-scatter over the network), else full. Hybrid
    shards the state over one node's GPUs only; where that would take more than half of
    a GPU's memory (`gpu_bytes`, when known), the state is sharded over every GPU."""
    if strategy != "auto":
        return strategy
    multi_node = world_size > local_world_size and world_size % local_world_size == 0
    if not multi_node:
        return "full"
    per_gpu = n_params * STATE_BYTES_PER_PARAM / local_world_size
    if gpu_bytes is not None and per_gpu > gpu_bytes / 2:
        return "full"
    return "hybrid"
