"""FSDP2 wrapping: the device mesh and `fully_shard`.

FSDP units (torchtitan's): the embedding, each TransformerBlock, and [final norm,
lm_head] are each their own unit, so their all-gathers and reduce-scatters overlap
with compute instead of sitting exposed in the root (for 8B the embedding and lm_head
are 1.05B parameters). Tied embeddings share one parameter between the embedding and
lm_head, which must stay in one unit: the root then holds all three.

Gradients are SUMMED over ranks, not averaged (sum_gradients): the loss is already
divided by the global count of trained-on targets (trainer.loss).

Sharding strategies, in FSDP2 terms:
  auto          hybrid on more than one node, else full (the default)
  full          1-D mesh, reshard after forward (ZeRO-3)
  shard_grad_op 1-D mesh, keep params gathered between forward and backward (ZeRO-2)
  hybrid        2-D mesh (replicate across nodes, shard within a node) (HSDP): the
                all-gathers and reduce-scatters stay on NVLink; only one all-reduce
                of the gradient shards crosses the network (EFA)
  no_shard      2-D mesh with shard size 1: pure replication (DDP-like)
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import CPUOffloadPolicy, FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.utils.checkpoint import (
    CheckpointPolicy,
    checkpoint,
    create_selective_checkpoint_contexts,
)

from trainer.model import Transformer, TransformerBlock
from trainer.rules import resolve_strategy

aten = torch.ops.aten
# Selective activation checkpointing keeps the outputs of the expensive ops (matmuls,
# attention) and recomputes the cheap memory-bound ones (norms, SiLU, RoPE, adds) in
# backward: most of full checkpointing's memory saving for a fraction of its compute.
SAVED_OPS = {
    aten.mm.default,
    aten.addmm.default,
    aten._scaled_dot_product_flash_attention.default,
    aten._scaled_dot_product_efficient_attention.default,
    aten._scaled_dot_product_cudnn_attention.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
}


def mesh_shape(strategy: str, world_size: int, local_world_size: int) -> tuple[int, ...]:
    """Mesh shape for a strategy: (shard,) or (replicate, shard)."""
    strategy = resolve_strategy(strategy, world_size, local_world_size)
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
    # all-gather in backward; no_shard has nothing to free. (`auto` is full or hybrid.)
    return strategy in ("auto", "full", "hybrid")


def _save_expensive_ops(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
    return CheckpointPolicy.MUST_SAVE if op in SAVED_OPS else CheckpointPolicy.PREFER_RECOMPUTE


def checkpoint_fn(mode: str) -> Any:
    """The wrapper each block's forward runs under, for an activation_checkpointing mode."""
    if mode == "none":
        return None
    if mode == "full":  # keep only the block's input; recompute everything in backward
        return partial(checkpoint, use_reentrant=False)
    if mode == "selective":
        return partial(
            checkpoint,
            use_reentrant=False,
            context_fn=partial(create_selective_checkpoint_contexts, _save_expensive_ops),
        )
    raise ValueError(f"unknown activation_checkpointing mode {mode!r}")


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The model's repeated decoder layers, found from the model itself (any family):
    the longest ModuleList whose members are all of one class."""
    runs = [
        list(child)
        for child in model.modules()
        if isinstance(child, nn.ModuleList)
        and len(child) > 0
        and len({type(layer) for layer in child}) == 1
    ]
    if not runs:
        raise ValueError(f"{type(model).__name__} has no repeated decoder layers to shard")
    return max(runs, key=len)


def apply_activation_checkpointing(model: nn.Module, mode: str) -> None:
    fn = checkpoint_fn(mode)
    if fn is None:
        return
    for block in decoder_layers(model):
        if isinstance(block, TransformerBlock):
            block.checkpoint_fn = fn
        else:  # another family's layer: wrap its forward (names stay the checkpoint's)
            block.forward = partial(_checkpointed, fn, block.forward)


def _checkpointed(fn: Any, forward: Any, *args: Any, **kwargs: Any) -> Any:
    if not torch.is_grad_enabled():
        return forward(*args, **kwargs)
    return fn(forward, *args, **kwargs)


def apply_compile(model: nn.Module) -> None:
    """torch.compile each block in place (before FSDP, as torchtitan does): blocks
    are identical, so one compiled graph serves them all and names stay unchanged."""
    for block in decoder_layers(model):
        # Other families' layers take optional arguments (masks, caches): no fullgraph.
        block.compile(fullgraph=isinstance(block, TransformerBlock))


def offload_policy(cpu_offload: bool, pin_memory: bool = True) -> CPUOffloadPolicy | None:
    # Sharded params, grads and optimizer state live in host memory and the optimizer
    # step runs on CPU; FSDP copies each block's shard to the GPU just in time. Pinned
    # memory needs CUDA: a CPU run takes the same path without it.
    return CPUOffloadPolicy(pin_memory=pin_memory) if cpu_offload else None


def _ends(model: nn.Module) -> tuple[nn.Module, nn.Module | None, nn.Module]:
    """(input embedding, final norm or None, lm_head) of our Llama or a transformers
    model (its base model's `norm`, or GPT-2's `ln_f`)."""
    if isinstance(model, Transformer):
        return model.embed_tokens, model.norm, model.lm_head
    base = getattr(model, getattr(model, "base_model_prefix", ""), model)
    norm = getattr(base, "norm", None) or getattr(base, "ln_f", None)
    embed, head = model.get_input_embeddings(), model.get_output_embeddings()  # type: ignore[operator]
    return embed, norm if isinstance(norm, nn.Module) else None, head


def fsdp_units(model: nn.Module) -> list[tuple[list[nn.Module], bool]]:
    """The units below the root, in forward order: (modules, reshard_after_forward
    allowed). The last unit's params would be re-gathered right away by backward, so
    it keeps them (torchtitan does the same)."""
    units: list[tuple[list[nn.Module], bool]] = []
    embed, norm, head = _ends(model)
    tied = head.weight is embed.weight
    if not tied:
        units.append(([embed], True))
    units += [([block], True) for block in decoder_layers(model)]
    if not tied:
        units.append(([norm, head] if norm is not None else [head], True))
    last_modules, _ = units[-1]
    units[-1] = (last_modules, False)
    return units


def sum_gradients(model: nn.Module) -> None:
    """Reduce gradients by SUM over all ranks (the loss carries the 1/N of the global
    target count). force_sum keeps it a plain SUM collective: no PreMulSum (which gloo
    lacks) and NCCL's zero-copy path."""
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)


def apply_fsdp(
    model: nn.Module,
    mesh: DeviceMesh,
    mp_policy: MixedPrecisionPolicy,
    reshard_after_forward: bool,
    cpu_offload: bool = False,
) -> nn.Module:
    """Shard `model` in place (embedding, per block, [norm, lm_head], then the root),
    with gradients summed over ranks, and return it."""
    policy = offload_policy(cpu_offload, pin_memory=mesh.device_type == "cuda")
    extra = {"offload_policy": policy} if cpu_offload else {}
    for modules, reshard in fsdp_units(model):
        fully_shard(
            modules if len(modules) > 1 else modules[0],
            mesh=mesh,
            mp_policy=mp_policy,
            reshard_after_forward=reshard_after_forward and reshard,
            **extra,
        )
    fully_shard(
        model,
        mesh=mesh,
        mp_policy=mp_policy,
        reshard_after_forward=reshard_after_forward,
        **extra,
    )
    sum_gradients(model)
    return model


def training_groups(model: nn.Module) -> list[dist.ProcessGroup]:
    """Every process group a training step's collectives run on: the default group
    (the agreement, the norm's full_tensor) and each dimension's group of the mesh the
    model is sharded over (FSDP's all-gathers and reduce-scatters; under HSDP the
    shard group of a node and the replicate group across nodes, groups of their own)."""
    groups = [dist.group.WORLD]
    sharded = next((p for p in model.parameters() if isinstance(p, DTensor)), None)
    if sharded is not None:
        groups += sharded.device_mesh.get_all_groups()
    unique: list[dist.ProcessGroup] = []
    for group in groups:
        if group is not None and all(group is not seen for seen in unique):
            unique.append(group)
    return unique
