"""The model names a job may ask for (`model_type`), as data the tools can read.

The names, the aliases other documents use and the advice for names that are no
preset are the trainer's own (trainer/presets.py, torch-free); the shapes the memory
estimate needs are a table here, pinned to the presets by
tests/trainer/test_memory_estimate.py. A name outside these is refused when the job is
planned, with the valid ones, instead of in every pod at start.
"""

from __future__ import annotations

from trainer import presets

# trainer/presets.py, the numbers the memory estimate needs: dim, n_layers, n_heads,
# n_kv_heads, vocab, ffn width, tied embeddings.
PRESET_SHAPES: dict[str, tuple[int, int, int, int, int, int, bool]] = {
    "debug": (128, 2, 4, 2, 512, 384, False),
    "debug_large": (512, 8, 8, 4, 512, 1408, False),
    "llama_v2_7b": (4096, 32, 32, 32, 32000, 11008, False),
    "llama_v3_1b": (2048, 16, 32, 8, 128256, 8192, True),
    "llama_v3_3b": (3072, 28, 24, 8, 128256, 8192, True),
    "llama_v3_8b": (4096, 32, 32, 8, 128256, 14336, False),
    # GPT-2's MLP is two 768x3072 matrices: 2048 counts them in this table's 3-matrix
    # (SwiGLU) block (124M parameters, as the trainer's start line says).
    "gpt2": (768, 12, 12, 12, 50257, 2048, True),
}
# The presets that exist so a CPU box runs a real job in a minute: not for a cluster.
TOY_PRESETS = ("debug", "debug_large")


def family_sizes(preset: str) -> list[str]:
    """The other presets of `preset`'s family (llama_v3_8b -> llama_v3_1b, llama_v3_3b),
    by name: the family is the name without its size suffix. Toys have none."""
    family = preset.rpartition("_")[0]
    if preset in TOY_PRESETS or not family:  # gpt2: one size
        return []
    return [
        p
        for p in PRESET_SHAPES
        if p != preset and p not in TOY_PRESETS and p.rpartition("_")[0] == family
    ]


def preset_name(model_type: str) -> str:
    """The preset `model_type` names (itself, or through an alias). Raises ValueError,
    naming the valid names (the trainer's words), for any other."""
    name = presets.preset_name(model_type)
    if name is None:
        raise ValueError(presets.unknown_model_type(model_type))
    return name
