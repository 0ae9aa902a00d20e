"""FSDP2 wrapping: the device mesh and `fully_shard`.

Each TransformerBlock becomes its own FSDP unit (its parameters are all-gathered
just before it runs and freed after), then the root picks up the rest (embeddings,
final norm, lm_head).

Sharding strategies, in FSDP2 terms:
  full          1-D mesh, reshard after forward (ZeRO-3)
  shard_grad_op 1-D mesh, keep params gathered between forward and backward (ZeRO-2)
  hybrid        2-D mesh (replicate across nodes, shard within a node) (HSDP)
  no_shard      2-D mesh with shard size 1: pure replication (DDP-like)
"""

from __future__ import annotations

from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from trainer.model import Transformer


def mesh_shape(strategy: str, world_size: int, local_world_size: int) -> tuple[int, ...]:
    """Mesh shape for a strategy: (shard,) or (replicate, shard)."""
    if strategy in ("full", "shard_grad_op"):
        return (world_size,)
    if strategy == "hybrid":
        if world_size % local_world_size:
            raise ValueError(
                f"hybrid sharding needs world_size ({world_size}) to be a multiple of "
                f"the processes per node ({local_world_size})"
            )
        return (world_size // local_world_size, local_world_size)
    if strategy == "no_shard":
        return (world_size, 1)
    raise ValueError(f"unknown sharding strategy {strategy!r}")


def build_mesh(
    device_type: str, strategy: str, world_size: int, local_world_size: int
) -> DeviceMesh:
    shape = mesh_shape(strategy, world_size, local_world_size)
    names = ("dp_shard",) if len(shape) == 1 else ("dp_replicate", "dp_shard")
    return init_device_mesh(device_type, shape, mesh_dim_names=names)


def reshard_after_forward(strategy: str) -> bool:
    # Freeing gathered params after forward saves memory at the cost of a second
    # all-gather in backward; no_shard has nothing to free.
    return strategy in ("full", "hybrid")


def apply_fsdp(
    model: Transformer,
    mesh: DeviceMesh,
    mp_policy: MixedPrecisionPolicy,
    reshard_after_forward: bool,
) -> nn.Module:
    """Shard `model` in place (per block, then root) and return it."""
    n_layers = len(model.layers)
    for i, block in enumerate(model.layers):
        # The last block's params would be re-gathered right away by backward, so
        # keep them (torchtitan does the same).
        fully_shard(
            block,
            mesh=mesh,
            mp_policy=mp_policy,
            reshard_after_forward=reshard_after_forward and i < n_layers - 1,
        )
    fully_shard(model, mesh=mesh, mp_policy=mp_policy, reshard_after_forward=reshard_after_forward)
    return model
