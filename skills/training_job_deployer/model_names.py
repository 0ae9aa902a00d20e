"""The model names a job may ask for (`model_type`), as data the tools can read.

The trainer runs in the job's image and the tools do not import it, so its preset
names, their shapes and the aliases other documents use are copied here; a test
(tests/trainer/test_model_names.py) pins every row to trainer/presets.py. A name
outside these is refused when the job is planned, with the valid ones, instead of
in every pod at start.
"""

from __future__ import annotations

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
# trainer/presets.py ALIASES: another document's name -> the preset it means.
ALIASES: dict[str, str] = {
    "llama_v2": "llama_v2_7b",
    "llama_v3": "llama_v3_8b",
    "llama2": "llama_v2_7b",
    "llama3": "llama_v3_8b",
}
# trainer/presets.py NOT_PRESETS: names of such documents that are no preset here.
NOT_PRESETS: dict[str, str] = {
    "gpt_neox": "GPT-NeoX has no preset; pass --model_name_or_path of an HF checkpoint",
    "mistral": "Mistral has no preset; pass --model_name_or_path of an HF Mistral checkpoint",
    "mixtral": "Mixtral (mixture of experts) is not supported by this trainer",
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
    naming the valid names, for any other."""
    name = ALIASES.get(model_type, model_type)
    if name in PRESET_SHAPES:
        return name
    advice = NOT_PRESETS.get(model_type)
    valid = ", ".join([*PRESET_SHAPES, *ALIASES])
    raise ValueError(
        f"unknown model_type {model_type!r}"
        + (f" ({advice})" if advice else "")
        + f"; choose one of {valid}"
    )
