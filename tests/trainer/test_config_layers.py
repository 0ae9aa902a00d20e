"""The four config layers (preset/HF config < YAML < environment < flags), unknown keys
in each, and the model presets against the public Hugging Face configs."""

from __future__ import annotations

import json

import pytest

from trainer.config import ConfigError, RopeScaling
from trainer.config_loader import load_config
from trainer.model import Transformer, num_params
from trainer.presets import PRESETS


def write(tmp_path, text: str):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return str(path)


def test_yaml_sections_and_flat_names_fill_the_tree(tmp_path):
    cfg = load_config(
        [
            "--config",
            write(
                tmp_path,
                """
max_steps: 17
optim: {learning_rate: 1.0e-3, grad_accum_steps: 4}
checkpoint: {checkpoint_dir: /ckpt, checkpoint_freq: 5, async_save: true}
parallel: {activation_checkpointing: selective}
model: {n_layers: 3}
validation_freq: 0
""",
            ),
        ],
        environ={},
    )
    assert cfg.max_steps == 17 and cfg.metrics.validation_freq == 0
    assert (cfg.optim.learning_rate, cfg.optim.grad_accum_steps) == (1e-3, 4)
    assert cfg.checkpoint.checkpoint_dir == "/ckpt" and cfg.checkpoint.async_save is True
    assert cfg.parallel.activation_checkpointing == "selective"
    assert cfg.model.n_layers == 3 and cfg.model.dim == PRESETS["debug"]["dim"]


def test_flags_beat_environment_beat_yaml_beat_preset(tmp_path):
    yaml_file = write(tmp_path, "max_steps: 10\nseed: 1\nlog_freq: 3\n")
    env = {"TRAINER_MAX_STEPS": "20", "TRAINER_SEED": "2", "UNRELATED": "x"}
    cfg = load_config(["--config", yaml_file, "--max_steps", "30"], environ=env)
    assert (cfg.max_steps, cfg.seed, cfg.metrics.log_freq) == (30, 2, 3)


def test_every_model_dimension_overrides_the_preset():
    cfg = load_config(
        "--model_type llama_v3_8b --dim 256 --n_layers 2 --n_heads 8 --n_kv_heads 2"
        " --vocab_size 1000 --ffn_hidden_dim 512 --max_seq_len 256 --rope_theta 1e4"
        " --norm_eps 1e-6 --tie_word_embeddings true".split(),
        environ={},
    )
    m = cfg.model
    assert (m.dim, m.n_layers, m.n_heads, m.n_kv_heads, m.vocab_size) == (256, 2, 8, 2, 1000)
    assert (m.hidden_dim, m.max_seq_len, m.rope_theta, m.norm_eps) == (512, 256, 1e4, 1e-6)
    assert m.tie_word_embeddings is True
    assert m.rope_scaling == RopeScaling(8.0, 1.0, 4.0, 8192)  # kept from the preset


def test_yaml_can_set_or_clear_rope_scaling(tmp_path):
    cfg = load_config(
        ["--config", write(tmp_path, "model: {rope_scaling: {factor: 4.0}}\n")], environ={}
    )
    assert cfg.model.rope_scaling == RopeScaling(factor=4.0)
    cfg = load_config(
        ["--model_type", "llama_v3_1b", "--config", write(tmp_path, "model: {rope_scaling: null}")],
        environ={},
    )
    assert cfg.model.rope_scaling is None


@pytest.mark.parametrize(
    ("argv", "environ", "yaml_text", "fragment"),
    [
        ([], {}, "max_step: 3\n", "unknown key 'max_step' in .* \\(did you mean 'max_steps'\\?\\)"),
        ([], {}, "optim: {learning_rat: 1}\n", "unknown key 'learning_rat' in .*section 'optim'"),
        ([], {}, "- a\n- b\n", "must be a mapping"),
        ([], {}, "max_steps: [\n", "not valid YAML"),
        ([], {}, "max_steps: many\n", "max_steps in .*invalid literal"),
        ([], {}, "async_save: maybe\n", "expected true or false"),
        ([], {"TRAINER_MAX_STPES": "3"}, None, "unknown key 'TRAINER_MAX_STPES' in the environ"),
        ([], {"TRAINER_MAX_STEPS": "x"}, None, "max_steps in \\$TRAINER_MAX_STEPS"),
        (["--config", "/no/such.yaml"], {}, None, "cannot read --config /no/such.yaml"),
        (["--activation_checkpointing", "some"], {}, None, "unknown activation_checkpointing"),
        (["--grad_accum_steps", "0"], {}, None, "grad_accum_steps must be >= 1"),
        (["--validation_split", "1.5"], {}, None, "validation_split must be in"),
        (["--compile", "perhaps"], {}, None, "invalid bool value"),
    ],
)
def test_unknown_or_bad_keys_in_any_layer_are_errors(tmp_path, argv, environ, yaml_text, fragment):
    if yaml_text is not None:
        argv = ["--config", write(tmp_path, yaml_text), *argv]
    with pytest.raises(ConfigError, match=fragment):
        load_config(argv, environ=environ)


def test_bare_bool_flag_means_true():
    cfg = load_config(["--async_save", "--resume", "false"], environ={})
    assert cfg.checkpoint.async_save is True and cfg.checkpoint.resume is False


# The public Hugging Face config.json values, and the parameter count each implies.
PUBLIC_SHAPES = {
    "llama_v2_7b": (4096, 32, 32, 32, 11008, 32000, False, 6_738_415_616),
    "llama_v3_1b": (2048, 16, 32, 8, 8192, 128256, True, 1_235_814_400),
    "llama_v3_3b": (3072, 28, 24, 8, 8192, 128256, True, 3_212_749_824),
    "llama_v3_8b": (4096, 32, 32, 8, 14336, 128256, False, 8_030_261_248),
}


@pytest.mark.parametrize("preset", sorted(PUBLIC_SHAPES))
def test_llama_preset_matches_the_public_config(preset):
    dim, layers, heads, kv, inter, vocab, tied, params = PUBLIC_SHAPES[preset]
    m = load_config(["--model_type", preset], environ={}).model
    got = (m.dim, m.n_layers, m.n_heads, m.n_kv_heads, m.hidden_dim, m.vocab_size)
    assert got == (dim, layers, heads, kv, inter, vocab)
    assert m.tie_word_embeddings is tied
    # Count without allocating 8B floats: one block on the meta device, times layers.
    import torch

    with torch.device("meta"):
        one_layer = Transformer(type(m)(**{**m.__dict__, "n_layers": 1}), rope_len=16)
    block = num_params(one_layer.layers[0])
    assert num_params(one_layer) + (layers - 1) * block == params


def test_an_hf_config_json_is_the_base_and_flags_still_override(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 64,
                "num_hidden_layers": 3,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "intermediate_size": 160,
                "vocab_size": 300,
                "max_position_embeddings": 256,
                "rope_theta": 500000.0,
                "rms_norm_eps": 1e-6,
                "tie_word_embeddings": True,
                "rope_scaling": {
                    "rope_type": "llama3",
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 64,
                },
            }
        )
    )
    cfg = load_config(["--model_name_or_path", str(tmp_path), "--n_layers", "2"], environ={})
    m = cfg.model
    assert (m.dim, m.n_layers, m.n_heads, m.n_kv_heads, m.hidden_dim) == (64, 2, 4, 2, 160)
    assert (m.vocab_size, m.max_seq_len, m.norm_eps, m.tie_word_embeddings) == (
        300,
        256,
        1e-6,
        True,
    )
    assert m.rope_scaling == RopeScaling(8.0, 1.0, 4.0, 64)


def test_a_missing_hf_checkpoint_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="config.json"):
        load_config(["--model_name_or_path", str(tmp_path / "nope")], environ={})
