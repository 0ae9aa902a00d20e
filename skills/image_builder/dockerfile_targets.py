"""The one torch/CUDA combination a stage should be aligned to (shared by the
analyzer's fix texts and the fixer): the stage's torch, the flavor it needs (devel for
flash-attn), and the nearest valid combination for its base's kind."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from skills.catalog import cuda as cuda_tables
from skills.catalog.cuda import Combo, Flavor
from skills.image_builder.base_image import BaseImage
from skills.image_builder.dockerfile_stages import Stage
from skills.image_builder.pip_installs import FLASH_ATTN, pip_installs, torch_pin


@dataclass
class Context:
    gpu: str | None
    driver_version: str | None


def needs_devel(stage: Stage, context_dir: Path | None) -> bool:
    return any(
        r.name in FLASH_ATTN for p in pip_installs(stage, context_dir) for r in p.requirements
    )


def torch_cuda(stage: Stage, base: BaseImage, context_dir: Path | None) -> str | None:
    """The CUDA the stage's torch is built for: the last pip install of torch (its +cuXXX
    or PyTorch index), else the base's CUDA (the torch it ships, or its toolkit)."""
    last = None
    for s in stage.chain():
        for p in pip_installs(s, context_dir):
            if pin := torch_pin(p):
                last = pin
    if last is not None and last[1]:
        return last[1]
    return base.cuda


def stage_torch(stage: Stage, base: BaseImage, context_dir: Path | None) -> str | None:
    pins = [
        pin[0].version
        for s in stage.chain()
        for p in pip_installs(s, context_dir)
        if (pin := torch_pin(p)) and pin[0].version
    ]
    return pins[-1] if pins else base.torch


def target_for(
    stage: Stage,
    base: BaseImage,
    ctx: Context,
    context_dir: Path | None,
    *,
    avoid: frozenset[str] = frozenset(),
    torch: str | None = None,
) -> Combo | None:
    """The one torch/CUDA combination a stage should be aligned to: the nearest valid one
    for its base's kind. For a CUDA base that ships no torch, the base's own CUDA when a
    wheel exists for it (the smallest edit), else the newest valid wheel CUDA."""
    torch = stage_torch(stage, base, context_dir) or torch
    flavor = "devel" if base.flavor == "devel" or needs_devel(stage, context_dir) else "runtime"
    common = {"gpu_name": ctx.gpu, "driver_version": ctx.driver_version, "avoid": avoid}
    if base.kind == "official":
        return cuda_tables.nearest_valid(torch, source="official", flavor=flavor, **common)
    if base.kind == "dlc":
        repo = base.repository
        return cuda_tables.nearest_valid(torch, source="dlc", dlc_repository=repo, **common)
    python = base.python
    if (
        torch
        and base.cuda
        and cuda_tables.wheel_exists(torch, base.cuda, python)
        and (base.cudnn is None or base.cudnn == cuda_tables.expected_cudnn(torch))
        and (ctx.gpu is None or cuda_tables.cuda_ok_for_gpu(base.cuda, ctx.gpu))
        and (
            ctx.driver_version is None or cuda_tables.driver_supports(ctx.driver_version, base.cuda)
        )
    ):
        return Combo(torch, base.cuda, cuda_tables.expected_cudnn(torch), None)
    return cuda_tables.nearest_valid(torch, source="wheel", python=python, **common)


def stage_flavor(stage: Stage, base: BaseImage, context_dir: Path | None) -> Flavor:
    return (
        "devel"
        if base.flavor == "devel" or needs_devel(stage, context_dir)
        else (base.flavor or "runtime")
    )
