"""A model that never exists whole on one rank: built on `meta`, sharded, then only
this rank's shard is allocated and filled (torchtitan's order).

Random init gives exactly the numbers of a full CPU build with the same seed: the
same draws from the same generator in the same order (nn's defaults at construction,
then Transformer.init_weights), one full tensor at a time, of which each rank keeps
its rows. HF weights are read per shard instead (hf.load_hf_weights).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

from trainer.config import ModelConfig
from trainer.model import INIT_STD, RMSNorm, Transformer


def build_meta_model(cfg: ModelConfig, rope_len: int) -> Transformer:
    """The model's structure with no storage: parameters cost nothing until allocated."""
    with torch.device("meta"):
        return Transformer(cfg, rope_len=rope_len)


def local_rows(param: torch.Tensor) -> slice:
    """The rows of the full tensor this rank holds (FSDP2 shards dim 0 only)."""
    if not isinstance(param, DTensor):
        return slice(0, param.shape[0])
    shape, offset = compute_local_shape_and_global_offset(
        param.shape, param.device_mesh, param.placements
    )
    assert all(o == 0 for o in offset[1:]), "only dim-0 sharding is supported"
    return slice(offset[0], offset[0] + shape[0])


def copy_shard(param: torch.Tensor, full_or_rows: torch.Tensor, *, rows_only: bool) -> None:
    """Write this rank's part of a tensor into `param` (a DTensor shard or a plain
    tensor). `full_or_rows` is the full tensor, or already only local_rows(param)."""
    local = param.to_local() if isinstance(param, DTensor) else param
    source = full_or_rows if rows_only else full_or_rows[local_rows(param)]
    local.copy_(source)


def materialize(model: Transformer, init_device: torch.device, compute: torch.device) -> None:
    """Allocate this rank's shards (uninitialized) on init_device, the RoPE tables on
    the compute device."""
    model.to_empty(device=init_device)
    if model.cfg.tie_word_embeddings:  # to_empty allocates each module's param anew
        model.lm_head.weight = model.embed_tokens.weight
    model.init_rope(compute)


@torch.no_grad()
def init_random(model: Transformer, seed: int) -> None:
    """Fill the shards with what `torch.manual_seed(seed); Transformer(cfg)` would
    hold. Leaves the global RNG where that full build leaves it."""
    torch.manual_seed(seed)
    for module in model.modules():  # the draws of nn's default init at construction
        if isinstance(module, nn.Linear):
            nn.init.kaiming_uniform_(torch.empty(module.weight.shape), a=math.sqrt(5))
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(torch.empty(module.weight.shape))
    for module in model.modules():  # Transformer.init_weights, shard by shard
        if isinstance(module, (nn.Linear, nn.Embedding)):
            full = nn.init.normal_(torch.empty(module.weight.shape), mean=0.0, std=INIT_STD)
            copy_shard(module.weight, full, rows_only=False)
        elif isinstance(module, RMSNorm):
            copy_shard(module.weight, torch.ones(module.weight.shape), rows_only=False)
