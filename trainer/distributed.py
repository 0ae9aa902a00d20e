"""Where this process sits in the job, its process group, and the stop signal.

torchrun (or another env:// launcher) describes the world in environment variables;
a plain `python -m trainer` is a world of one with an in-memory store.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

# Until the first step is done: rendezvous, HF weight reads, compile and the first
# all-gathers may all be slow.
PROCESS_GROUP_TIMEOUT = timedelta(minutes=10)
# After it, a collective that waits this long is a hang: fail (and let NCCL's flight
# recorder dump) rather than hold the GPUs for the first timeout. Long enough for rank
# 0's work between collectives (checkpoint marker, S3 pruning, an eval).
TRAIN_TIMEOUT = timedelta(minutes=5)


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits; torchrun sets these variables, a plain run has none."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    launched: bool  # under torchrun (or another env:// launcher)

    @classmethod
    def from_environ(cls, env: dict[str, str] | None = None) -> DistEnv:
        env = dict(os.environ if env is None else env)
        launched = "WORLD_SIZE" in env
        return cls(
            rank=int(env.get("RANK", 0)),
            world_size=int(env.get("WORLD_SIZE", 1)),
            local_rank=int(env.get("LOCAL_RANK", 0)),
            local_world_size=int(env.get("LOCAL_WORLD_SIZE", env.get("WORLD_SIZE", 1))),
            launched=launched,
        )


def init_distributed(backend: str, device: torch.device, env: DistEnv) -> None:
    # device_id binds the group to this rank's GPU: NCCL connects eagerly, and a barrier
    # knows its device (without it torch warns at every barrier that it guesses).
    device_id = device if device.type == "cuda" else None
    if not env.launched:
        # `python -m trainer`: a world of one. An in-memory store needs no port, so the
        # same FSDP code path runs with nothing to rendezvous with.
        dist.init_process_group(
            backend=backend, store=dist.HashStore(), rank=0, world_size=1, device_id=device_id
        )
    elif os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        # Under torchrun. Its store outlives a restart (--max-restarts) and still holds
        # the dead attempt's gloo addresses, which the new workers would try to
        # connect to; a key prefix per attempt keeps each attempt to itself.
        store = dist.TCPStore(
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
            env.world_size,
            is_master=False,
            timeout=PROCESS_GROUP_TIMEOUT,
        )
        attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        dist.init_process_group(
            backend=backend,
            store=dist.PrefixStore(f"/trainer/attempt_{attempt}", store),
            rank=env.rank,
            world_size=env.world_size,
            timeout=PROCESS_GROUP_TIMEOUT,
            device_id=device_id,
        )
    else:  # another env:// launcher (MASTER_ADDR/PORT, RANK, WORLD_SIZE)
        dist.init_process_group(backend=backend, device_id=device_id, timeout=PROCESS_GROUP_TIMEOUT)


def shorten_timeout(
    groups: Sequence[dist.ProcessGroup | None] = (None,), timeout: timedelta = TRAIN_TIMEOUT
) -> None:
    """`timeout` from now on for each of `groups` (None: the default group), called
    after the first step with every group the step's collectives use (parallel.
    training_groups): HSDP's replicate and shard groups have timeouts of their own."""
    for group in groups:
        dist.distributed_c10d._set_pg_timeout(timeout, group)


class StopRequest:
    """Set by SIGTERM (Kubernetes eviction, spot reclaim, torchrun shutting down).
    The loop finishes its step, saves a checkpoint and exits with EXIT_PREEMPTED."""

    def __init__(self) -> None:
        self.signal: int | None = None
        self._previous: Any = None

    def install(self) -> None:
        self._previous = signal.signal(signal.SIGTERM, self._handle)

    def uninstall(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)

    def _handle(self, signum: int, frame: Any) -> None:
        self.signal = signum

    @property
    def requested(self) -> bool:
        return self.signal is not None
