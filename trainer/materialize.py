"""A model that never exists whole on one rank: built on `meta`, sharded, then only
this rank's shard is allocated and filled (torchtitan's order).

Random init on CPU gives exactly the numbers of a full CPU build with the same seed:
the same draws from the same generator in the same order (nn's defaults at
construction, then Transformer.init_weights), one full tensor at a time, of which each
rank keeps its rows. On a GPU that would draw every full tensor on every rank on the
host (~80 s per rank for 8B), so there each rank draws only its own rows, on its
device, in blocks with a generator per (seed, parameter, block): the same numbers at
every world size, and no full tensor anywhere. HF weights are read per shard instead
(hf.load_hf_weights).
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
def init_random(model: Transformer, seed: int, on_device: bool = False) -> None:
    """Fill the shards with random init: drawn per shard on the device (`on_device`,
    the GPU path), else what `torch.manual_seed(seed); Transformer(cfg)` would hold
    (leaving the global RNG where that full build leaves it)."""
    if on_device:
        init_random_sharded(model, seed)
        return
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


# Rows drawn per generator seed: small enough that a rank wastes little drawing the
# rows of a block it only partly holds, large enough to keep the launches few.
BLOCK_ROWS = 64


@torch.no_grad()
def init_random_sharded(model: Transformer, seed: int) -> None:
    """Normal(0, INIT_STD) matrices and ones for norms (Transformer.init_weights), each
    rank drawing only its own rows on the device its shard lives on."""
    for key, module in enumerate(model.modules()):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            fill_normal_rows(module.weight, seed, key, INIT_STD)
        elif isinstance(module, RMSNorm):
            weight = module.weight
            (weight.to_local() if isinstance(weight, DTensor) else weight).fill_(1.0)


def block_seed(seed: int, key: int, block: int) -> int:
    """The generator seed of one block of rows of one parameter."""
    return ((seed * 1_000_003 + key) * 1_000_033 + block) % (2**63)


def fill_normal_rows(param: torch.Tensor, seed: int, key: int, std: float) -> None:
    """Fill this rank's rows of `param` with the rows the full tensor would have, drawn
    block by block (BLOCK_ROWS rows per generator seed), whatever the sharding."""
    local = param.to_local() if isinstance(param, DTensor) else param
    rows = local_rows(param)
    if local.numel() == 0 or rows.stop <= rows.start:
        return
    gen = torch.Generator(device=local.device)
    for block in range(rows.start // BLOCK_ROWS, (rows.stop - 1) // BLOCK_ROWS + 1):
        gen.manual_seed(block_seed(seed, key, block))
        drawn = torch.empty(
            (BLOCK_ROWS, *local.shape[1:]), dtype=torch.float32, device=local.device
        ).normal_(0.0, std, generator=gen)
        lo, hi = max(rows.start, block * BLOCK_ROWS), min(rows.stop, (block + 1) * BLOCK_ROWS)
        start = block * BLOCK_ROWS
        local[lo - rows.start : hi - rows.start].copy_(drawn[lo - start : hi - start])
