"""Float8 training (`--float8`) through torchao, applied as torchtitan applies it.

- Which GPUs: float8 tensor cores are SM 8.9 and newer (Ada L4/L40S, Hopper, Blackwell).
  Anything else, CPU included, is refused at start with the reason (`refusal`).
- Which linears: every `nn.Linear` of the decoder layers whose dims are multiples of 16
  (the float8 GEMM's requirement) and large enough that the GEMM's gain outweighs the
  cost of the dynamic casts (torchao's tensorwise thresholds, measured on H100:
  `_auto_filter_for_recipe`); never the head (its loss is the chunked cross-entropy,
  which reads the head's weight directly and keeps the logits precise) nor the
  embedding (a lookup, not a GEMM).
- How: torchao's tensorwise dynamic scaling (the recipe behind torchtitan's Llama-3-8B
  H100 figures) converts the linears on `meta`, before AC, compile and FSDP2 (the
  trainer's order, torchtitan's too). Under FSDP2 with more than one shard the weights
  are all-gathered in float8 (half the bytes of bf16), and their scales are computed
  for all of them at once after each optimizer step
  (`precompute_float8_dynamic_scale_for_fsdp`), one small all-reduce instead of one per
  linear per forward. Master weights, gradients and optimizer state stay fp32.

MFU stays reported against the bf16 peak (the model's FLOPs are the same); the step
line adds the fp8 peak's MFU beside it (trainer.metrics.peak_fp8_flops).

torchao is imported only when `--float8` is on, and is an extra of its own (pyproject's
`float8`): without it --float8 is refused at start.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from trainer.config import ConfigError

# Float8 tensor cores (torch._scaled_mm's e4m3/e5m2 GEMMs): Ada (8.9) and later.
MIN_CAPABILITY = (8, 9)
# The float8 GEMM needs both dims of a weight to be multiples of 16.
DIM_MULTIPLE = 16
RECIPE = "tensorwise"


def refusal(device_type: str, capability: tuple[int, int] | None) -> str | None:
    """Why --float8 cannot run on this device (None: it can). `capability` is
    torch.cuda.get_device_capability() of the run's GPU (None on CPU)."""
    if device_type != "cuda" or capability is None:
        return (
            "float8 needs a GPU with float8 tensor cores (SM 8.9+: L4, L40S, H100, "
            "H200, B200); this run has no GPU"
        )
    if tuple(capability) < MIN_CAPABILITY:
        major, minor = capability
        return (
            f"float8 needs float8 tensor cores (SM 8.9+: L4, L40S, H100, H200, B200); "
            f"this GPU is SM {major}.{minor}: train in bf16 (leave TRAINER_FLOAT8 unset)"
        )
    return None


def _head_weights(model: nn.Module) -> set[int]:
    """ids of the weights of the output head and the input embedding (tied or not)."""
    found: set[int] = set()
    for getter in ("get_output_embeddings", "get_input_embeddings"):
        module = getattr(model, getter, lambda: None)()
        if isinstance(module, nn.Module) and getattr(module, "weight", None) is not None:
            found.add(id(module.weight))
    for name in ("lm_head", "embed_tokens"):
        module = getattr(model, name, None)
        if isinstance(module, nn.Module) and getattr(module, "weight", None) is not None:
            found.add(id(module.weight))
    return found


def small_for_float8(out_features: int, in_features: int) -> bool:
    """torchao's tensorwise threshold (torchao.float8._auto_filter_for_recipe, from its
    H100 measurements): below it the casts cost more than the float8 GEMM saves."""
    return in_features <= 4096 and out_features <= 1024


def linear_filter(model: nn.Module, small_too: bool = False) -> Callable[[nn.Module, str], bool]:
    """Which linears become Float8Linear: not the head, dims multiples of 16, and (unless
    `small_too`, for a test of the numerics on a model small enough for a CPU) not the
    small ones."""
    heads = _head_weights(model)

    def keep(module: nn.Module, fqn: str) -> bool:
        if not isinstance(module, nn.Linear) or id(module.weight) in heads:
            return False
        out_features, in_features = module.weight.shape
        if out_features % DIM_MULTIPLE or in_features % DIM_MULTIPLE:
            return False
        return small_too or not small_for_float8(out_features, in_features)

    return keep


@dataclass
class Float8:
    """What the conversion did: the linears converted, and whether their weights are
    all-gathered in float8 (then their scales are precomputed after each step)."""

    converted: list[str] = field(default_factory=list)
    fp8_all_gather: bool = False

    def after_optimizer_step(self, model: nn.Module) -> None:
        """The next forward's float8 scales of every sharded weight, in one all-reduce."""
        if self.fp8_all_gather and self.converted:
            from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

            precompute_float8_dynamic_scale_for_fsdp(model)


def torchao_config(sharded: bool, emulate: bool = False) -> Any:
    """torchao's tensorwise config; float8 all-gather where FSDP2 shards the weights.
    `emulate`: the float8 casts and a high-precision GEMM (a CPU's test of the numerics)."""
    from torchao.float8 import Float8LinearConfig

    return Float8LinearConfig(enable_fsdp_float8_all_gather=sharded, emulate=emulate)


def convert(
    model: nn.Module, *, sharded: bool, emulate: bool = False, small_too: bool = False
) -> Float8:
    """Swap the chosen linears of `model` (on meta or allocated, before FSDP2) for
    torchao's Float8Linear, in place."""
    from torchao.float8 import convert_to_float8_training

    keep = linear_filter(model, small_too)
    chosen = [name for name, module in model.named_modules() if keep(module, name)]
    convert_to_float8_training(
        model, config=torchao_config(sharded, emulate), module_filter_fn=keep
    )
    return Float8(chosen, fp8_all_gather=sharded and bool(chosen))


def apply(model: nn.Module, device: torch.device, sharded: bool) -> Float8:
    """--float8 on a real run: refused (ConfigError, with the reason) where the device
    has no float8 tensor cores; else the model converted."""
    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    if (problem := refusal(device.type, capability)) is not None:
        raise ConfigError(problem)
    if importlib.util.find_spec("torchao") is None:
        raise ConfigError(
            "float8 needs torchao, which this python lacks: install fsdp-eks[float8] "
            "(pip install 'torchao>=0.18') in the image"
        )
    return convert(model, sharded=sharded)
