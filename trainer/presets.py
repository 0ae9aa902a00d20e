"""Named model shapes (`--model_type`).

Each preset lists the ModelConfig fields it sets (plain dicts, so this module has no
imports and config.py can depend on it). Real Llama shapes (e.g. llama_v3_1b) will be
added here together with the HF checkpoint mapping; the tiny ones exist so that a
CPU box can run a real multi-process job in under a minute.
"""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, Any]] = {
    # Fast enough for `torchrun --nproc_per_node=2` on a 2-core CPU machine.
    "debug": {
        "dim": 128,
        "n_layers": 2,
        "n_heads": 4,
        "n_kv_heads": 2,
        "vocab_size": 512,
        "multiple_of": 64,
        "max_seq_len": 512,
    },
    # Same family, big enough to be a meaningful smoke test on one GPU.
    "debug_large": {
        "dim": 512,
        "n_layers": 8,
        "n_heads": 8,
        "n_kv_heads": 4,
        "vocab_size": 512,
        "multiple_of": 128,
        "max_seq_len": 1024,
    },
}
