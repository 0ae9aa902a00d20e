"""Hugging Face Llama format: config round trip, weight loading/saving, and logits equal
to transformers' own LlamaForCausalLM on the same weights."""

from __future__ import annotations

import dataclasses
import json
import uuid

import pytest
import torch
from safetensors.torch import load_file, save_file

from trainer import hf, hf_config
from trainer.config import ConfigError, ModelConfig, RopeScaling
from trainer.model import Transformer

SMALL = ModelConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=300, max_seq_len=64)
# factor 8 over an original context of 16: the low frequencies really are rescaled.
SCALED_TIED = dataclasses.replace(
    SMALL,
    rope_scaling=RopeScaling(factor=8.0, original_max_position_embeddings=16),
    tie_word_embeddings=True,
)
DEBUG = ModelConfig()  # the "debug" preset's shape


def make(cfg: ModelConfig, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return randomize_norms(Transformer(cfg).eval())


@torch.no_grad()
def randomize_norms(model: torch.nn.Module) -> torch.nn.Module:
    """Norm weights start at 1; random ones catch a norm loaded into the wrong place."""
    for name, param in model.named_parameters():
        if name.endswith("norm.weight"):
            param.uniform_(0.5, 1.5)
    return model


def tokens(cfg: ModelConfig, seq: int = 48) -> torch.Tensor:
    return torch.randint(0, cfg.vocab_size, (2, seq), generator=torch.Generator().manual_seed(1))


def hf_llama(path):
    transformers = pytest.importorskip("transformers")
    return transformers.LlamaForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation="sdpa"
    ).eval()


# --- config.json ------------------------------------------------------------------------


@pytest.mark.parametrize("cfg", [DEBUG, SMALL, SCALED_TIED], ids=["debug", "small", "scaled"])
def test_config_round_trip(cfg):
    back = hf_config.model_config_from_hf(hf.hf_config_from_model(cfg))
    # ffn_hidden_dim comes back explicit (intermediate_size); the width is the same.
    assert dataclasses.replace(back, ffn_hidden_dim=None, multiple_of=cfg.multiple_of) == cfg
    assert back.hidden_dim == cfg.hidden_dim


def test_config_round_trip_through_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    (tmp_path / "config.json").write_text(json.dumps(hf.hf_config_from_model(SCALED_TIED)))
    config = transformers.LlamaConfig.from_pretrained(tmp_path)
    assert config.rope_parameters["rope_type"] == "llama3"
    assert config.rope_parameters["factor"] == 8.0
    assert config.tie_word_embeddings is True
    config.save_pretrained(tmp_path / "resaved")
    resaved = json.loads((tmp_path / "resaved" / "config.json").read_text())
    back = hf_config.model_config_from_hf(resaved)
    assert back.rope_scaling == SCALED_TIED.rope_scaling
    assert back.tie_word_embeddings and back.hidden_dim == SCALED_TIED.hidden_dim


# --- our state dict <-> safetensors -----------------------------------------------------


def test_hf_state_dict_names_and_tied_lm_head():
    untied = hf.hf_state_dict(make(SMALL).state_dict(), SMALL)
    assert "lm_head.weight" in untied and "model.embed_tokens.weight" in untied
    assert all(k.startswith("model.") for k in untied if k != "lm_head.weight")
    tied = hf.hf_state_dict(make(SCALED_TIED).state_dict(), SCALED_TIED)
    assert "lm_head.weight" not in tied
    ptrs = [t.untyped_storage().data_ptr() for t in tied.values()]
    assert len(set(ptrs)) == len(ptrs) and all(t.is_contiguous() for t in tied.values())


def test_hf_state_dict_copies_tensors_that_share_storage(tmp_path):
    flat = torch.arange(8.0)
    out = hf.hf_state_dict({"norm.weight": flat[:4], "layers.0.x": flat[4:]}, SMALL)
    assert len({t.untyped_storage().data_ptr() for t in out.values()}) == 2
    # safetensors accepts them. (Never "/dev/null": it writes a temp file and renames
    # it over the target, which replaced the device with a root-only regular file.)
    save_file(out, tmp_path / "shared.safetensors")


def test_save_hf_single_file_and_metadata(tmp_path):
    files = hf.save_hf(make(SMALL).state_dict(), SMALL, tmp_path, dtype=torch.bfloat16)
    assert sorted(p.name for p in files) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
    ]
    from safetensors import safe_open

    with safe_open(tmp_path / "model.safetensors", "pt") as f:
        assert f.metadata() == {"format": "pt"}
        assert f.get_tensor("model.norm.weight").dtype == torch.bfloat16
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["torch_dtype"] == config["dtype"] == "bfloat16"


def test_save_hf_shards_and_loads_back(tmp_path):
    model = make(SMALL)
    # Small enough that every shard holds only a few tensors.
    files = hf.save_hf(model.state_dict(), SMALL, tmp_path, max_shard_bytes=80_000)
    shards = sorted(p.name for p in files if p.suffix == ".safetensors")
    assert len(shards) > 2 and not (tmp_path / "model.safetensors").exists()
    assert shards[0] == f"model-00001-of-{len(shards):05d}.safetensors"
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == shards
    assert index["metadata"]["total_size"] == 4 * sum(p.numel() for p in model.parameters())
    assert set(index["weight_map"]) == set(hf.hf_state_dict(model.state_dict(), SMALL))

    loaded = make(SMALL, seed=1)
    hf.load_hf_weights(loaded, str(tmp_path))
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor, rtol=0, atol=0)

    # A later unsharded export into the same dir leaves no stale shard behind.
    hf.save_hf(model.state_dict(), SMALL, tmp_path)
    assert sorted(p.name for p in tmp_path.glob("*.safetensors")) == ["model.safetensors"]
    assert not (tmp_path / "model.safetensors.index.json").exists()


def test_save_hf_copies_tokenizer_and_special_ids(tmp_path):
    from tokenizers import Tokenizer, models

    tok_dir = tmp_path / "tok"
    tok_dir.mkdir()
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "hello": 3}
    Tokenizer(models.WordLevel(vocab, unk_token="<unk>")).save(str(tok_dir / "tokenizer.json"))
    (tok_dir / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>"}))
    files = hf.save_hf(make(SMALL).state_dict(), SMALL, tmp_path / "out", tokenizer_dir=tok_dir)
    assert {"tokenizer.json", "tokenizer_config.json"} <= {p.name for p in files}
    generation = json.loads((tmp_path / "out" / "generation_config.json").read_text())
    assert (generation["bos_token_id"], generation["eos_token_id"]) == (1, 2)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"]) == (1, 2)


# --- load_hf_weights strictness ---------------------------------------------------------


def write_weights(path, tensors):
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, path / "model.safetensors")
    return str(path)


def test_load_rejects_missing_tensors(tmp_path):
    weights = hf.hf_state_dict(make(SMALL).state_dict(), SMALL)
    del weights["model.layers.1.mlp.up_proj.weight"]
    with pytest.raises(ConfigError, match=r"missing 1 tensors: layers\.1\.mlp\.up_proj\.weight"):
        hf.load_hf_weights(make(SMALL), write_weights(tmp_path, weights))


def test_load_rejects_unexpected_tensors_and_wrong_shapes(tmp_path):
    weights = hf.hf_state_dict(make(SMALL).state_dict(), SMALL)
    weights["model.layers.2.mlp.up_proj.weight"] = torch.zeros(2, 2)
    weights["model.norm.weight"] = torch.ones(32)
    with pytest.raises(ConfigError) as info:
        hf.load_hf_weights(make(SMALL), write_weights(tmp_path, weights))
    assert "unexpected 1 tensors: layers.2.mlp.up_proj.weight" in str(info.value)
    assert "norm.weight (32,) vs model (64,)" in str(info.value)


def test_load_without_weights_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="has no model.safetensors"):
        hf.load_hf_weights(make(SMALL), str(tmp_path))


def test_load_ignores_rope_buffers_and_an_untied_lm_head_when_tied(tmp_path):
    source = make(SCALED_TIED)
    weights = hf.hf_state_dict(source.state_dict(), SCALED_TIED)
    weights["model.layers.0.self_attn.rotary_emb.inv_freq"] = torch.ones(8)
    weights["lm_head.weight"] = torch.zeros(300, 64)  # must not overwrite the embedding
    weights = {k: v.to(torch.bfloat16) for k, v in weights.items()}
    target = make(SCALED_TIED, seed=1)
    hf.load_hf_weights(target, write_weights(tmp_path, weights))
    assert target.lm_head.weight is target.embed_tokens.weight
    assert target.embed_tokens.weight.dtype == torch.float32  # cast to the model's dtype
    expected = source.embed_tokens.weight.to(torch.bfloat16).float()
    torch.testing.assert_close(target.embed_tokens.weight, expected, rtol=0, atol=0)


# --- same logits as transformers --------------------------------------------------------


@pytest.mark.parametrize("cfg", [DEBUG, SCALED_TIED], ids=["debug", "llama3-rope-tied"])
def test_transformers_loads_our_export_with_identical_logits(tmp_path, cfg):
    ours = make(cfg)
    hf.save_hf(ours.state_dict(), cfg, tmp_path)
    theirs = hf_llama(tmp_path)
    assert theirs.config.tie_word_embeddings == cfg.tie_word_embeddings
    x = tokens(cfg)
    with torch.no_grad():
        torch.testing.assert_close(theirs(x).logits, ours(x), rtol=0, atol=1e-5)


def test_rope_scaling_changes_the_logits():
    # Guards the test above: with these dims, llama3 scaling is not a no-op.
    unscaled = dataclasses.replace(SCALED_TIED, rope_scaling=None)
    x = tokens(SCALED_TIED)
    with torch.no_grad():
        assert not torch.allclose(make(SCALED_TIED)(x), make(unscaled)(x), atol=1e-3)


@pytest.mark.parametrize("cfg", [SMALL, SCALED_TIED], ids=["small", "llama3-rope-tied"])
def test_we_load_a_transformers_checkpoint_with_identical_logits(tmp_path, cfg):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(**hf.hf_config_from_model(cfg))
    torch.manual_seed(0)
    theirs = randomize_norms(transformers.LlamaForCausalLM(config).float().eval())
    theirs.save_pretrained(tmp_path)
    assert ("lm_head.weight" in load_file(tmp_path / "model.safetensors")) != (
        cfg.tie_word_embeddings
    )

    ours = make(cfg, seed=1)
    hf.load_hf_weights(ours, str(tmp_path))
    assert hf_config.read_model_config(str(tmp_path)).hidden_dim == cfg.hidden_dim
    x = tokens(cfg)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x).logits, rtol=0, atol=1e-5)


@pytest.mark.integration
def test_load_from_s3_and_read_its_config(moto_server, tmp_path, monkeypatch):
    import boto3

    monkeypatch.setenv("FSDP_EKS_CACHE_DIR", str(tmp_path / "cache"))
    source = make(SCALED_TIED)
    hf.save_hf(source.state_dict(), SCALED_TIED, tmp_path / "hf", max_shard_bytes=80_000)
    s3 = boto3.client("s3")
    bucket = f"models-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    for path in (tmp_path / "hf").iterdir():
        s3.upload_file(str(path), bucket, f"llama/{path.name}")

    uri = f"s3://{bucket}/llama"
    assert hf_config.read_model_config(uri).rope_scaling == SCALED_TIED.rope_scaling
    loaded = make(SCALED_TIED, seed=1)
    hf.load_hf_weights(loaded, uri)
    x = tokens(SCALED_TIED)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), source(x), rtol=0, atol=0)


def test_save_hf_without_tokenizer_leaves_special_ids_unset(tmp_path):
    hf.save_hf(make(SMALL).state_dict(), SMALL, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["bos_token_id"] is None and config["eos_token_id"] is None
    assert json.loads((tmp_path / "generation_config.json").read_text()) == {
        "_from_model_config": True
    }
    transformers = pytest.importorskip("transformers")
    assert transformers.LlamaConfig.from_pretrained(tmp_path).eos_token_id is None
