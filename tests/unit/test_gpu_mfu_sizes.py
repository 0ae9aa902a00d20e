"""gpu_mfu's sizes per host: --quick is the smallest size on any host. On an H100 the
quick mode asked the debug model for 8192 positions and the trainer refused its config."""

from __future__ import annotations

import pytest

from benchmarks.gpu_mfu import CPU_DEFAULTS, GPU_DEFAULTS, QUICK_SHAPE, SHAPE, default_sizes
from trainer.config_loader import load_config


@pytest.mark.parametrize(
    ("n_gpus", "quick", "expected"),
    [(0, True, CPU_DEFAULTS), (0, False, CPU_DEFAULTS), (1, True, CPU_DEFAULTS),
     (8, True, CPU_DEFAULTS), (1, False, GPU_DEFAULTS), (8, False, GPU_DEFAULTS)],
)  # fmt: skip
def test_quick_is_the_smallest_size_on_any_host(n_gpus, quick, expected):
    assert default_sizes(n_gpus, quick) == expected


@pytest.mark.parametrize("n_gpus", [0, 1, 8])
@pytest.mark.parametrize("quick", [True, False])
def test_the_default_sizes_pass_the_trainers_config_check(n_gpus, quick):
    layers, seq, batch, vocab = default_sizes(n_gpus, quick)
    flags = [*(QUICK_SHAPE if quick else SHAPE), "--n_layers", str(layers)]
    flags += ["--seq_len", str(seq), "--train_batch_size", str(batch)]
    flags += ["--vocab_size", str(vocab)] if vocab else []
    load_config(flags, environ={})  # raises ConfigError on a size the model cannot hold
