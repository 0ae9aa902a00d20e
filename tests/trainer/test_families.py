"""Any decoder family transformers has, under FSDP2 on 2 ranks (gloo): built on `meta`
from its config.json, sharded per decoder layer found from the model, loaded per shard
from its safetensors. Per family: the sharded model's logits equal the single-process
transformers model's on the same input, a backward pass with activation checkpointing
reaches every shard, and the export (hf.save_hf, what trainer.export writes) reloads
in transformers with the same logits. Tiny random configs built here: no hub."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tests.trainer.conftest import spawn
from trainer import families, hf, hf_config
from trainer.config import ConfigError
from trainer.parallel import apply_activation_checkpointing, apply_fsdp, build_mesh

VOCAB = 97  # rows that do not split evenly over 2 ranks
SHAPE = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64,
             pad_token_id=0, bos_token_id=1, eos_token_id=2)  # fmt: skip
# model_type -> what its config needs beyond SHAPE. One row per family.
FAMILIES: dict[str, dict[str, object]] = {
    "mistral": {},
    "qwen2": {},
    "qwen3": {"head_dim": 16},
    "gemma2": {"head_dim": 16},  # tied, scaled embeddings, softcapping
    "gemma3_text": {"head_dim": 16},  # sliding + global RoPE tables
    "exaone": {},  # EXAONE 3.5
    "exaone4": {},
    "phi3": {},  # fused qkv and gate_up projections
    "olmo2": {},
    "granite": {},
    "smollm3": {},
    "gpt2": {"n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64},  # Conv1D, tied
}
TOKENS = torch.randint(3, VOCAB, (2, 12), generator=torch.Generator().manual_seed(1))


def make_checkpoint(model_type: str, out: Path) -> torch.Tensor:
    """A random tiny checkpoint of the family; returns its logits on TOKENS."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(model_type, **SHAPE, **FAMILIES[model_type])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    model.save_pretrained(out)
    with torch.no_grad():
        return model(TOKENS).logits


def _worker(rank: int, store_path: str, root: str) -> None:
    from torch.distributed.fsdp import MixedPrecisionPolicy

    store = dist.FileStore(store_path, 2)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    try:
        for model_type in FAMILIES:
            where = Path(root, model_type)
            cfg = hf_config.read_model_config(str(where / "hf"))
            assert cfg.hf_config is not None and cfg.vocab_size == VOCAB
            model = families.build_meta(cfg.hf_config)
            apply_activation_checkpointing(model, "full")
            apply_fsdp(model, build_mesh("cpu", "full", 2, 2), MixedPrecisionPolicy(), True)
            families.materialize(model, torch.device("cpu"))
            hf.load_hf_weights(model, str(where / "hf"))
            for name, param in model.named_parameters():
                if param.shape[0] > 1:
                    assert param.to_local().numel() < param.numel(), f"{name}: held whole"
            model.eval()
            with torch.no_grad():
                logits = model(TOKENS)
            expected = torch.load(where / "logits.pt")
            torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
            model.train()
            model(TOKENS).float().logsumexp(-1).mean().backward()
            for name, param in model.named_parameters():
                assert param.grad is not None, f"{model_type}: {name} got no gradient"
            state = {n: p.full_tensor() for n, p in model.named_parameters()}
            if rank == 0:
                hf.save_hf(state, cfg, where / "export")
            dist.barrier()
    finally:
        dist.destroy_process_group()


def test_every_family_shards_loads_and_exports_like_transformers(tmp_path):
    from transformers import AutoModelForCausalLM

    expected = {}
    for model_type in FAMILIES:
        expected[model_type] = make_checkpoint(model_type, tmp_path / model_type / "hf")
        torch.save(expected[model_type], tmp_path / model_type / "logits.pt")
    spawn(_worker, (str(tmp_path / "store"), str(tmp_path)), 2)
    for model_type in FAMILIES:
        out = tmp_path / model_type / "export"
        saved = json.loads((out / "config.json").read_text())
        assert saved["model_type"] == model_type
        reloaded = AutoModelForCausalLM.from_pretrained(out).eval()
        with torch.no_grad():
            torch.testing.assert_close(reloaded(TOKENS).logits, expected[model_type])


def test_remote_code_is_refused_unless_opted_in(tmp_path):
    config = {"model_type": "my_own_lm", "auto_map": {"AutoModelForCausalLM": "m.MyLM"},
              "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 97}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="TRAINER_TRUST_REMOTE_CODE=true"):
        hf_config.read_model_config(str(tmp_path))
    assert hf_config.read_model_config(str(tmp_path), trust_remote_code=True).hf_config == config


def test_a_model_that_is_no_causal_lm_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "vit"}))
    with pytest.raises(ConfigError, match="not a causal language model"):
        hf_config.read_model_config(str(tmp_path))


def test_a_family_trains_on_2_ranks_checkpoints_and_exports(tmp_path, run_trainer):
    """The trainer itself on a Gemma 2 checkpoint (tied, scaled embeddings): 2 ranks with
    activation checkpointing, a checkpoint, `trainer.export`, reloaded by transformers."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from tests.trainer.test_export import run_export

    config = AutoConfig.for_model("gemma2", **{**SHAPE, "vocab_size": 320}, head_dim=16)
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "hf")
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    proc, events = run_trainer(
        ["--model_name_or_path", str(tmp_path / "hf"), "--seq_len", "32",
         "--train_batch_size", "2", "--max_steps", "4", "--log_freq", "1",
         "--validation_freq", "0", "--activation_checkpointing", "selective",
         "--checkpoint_dir", str(ckpt)],
        nproc=2,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (start,) = [e for e in events if e["event"] == "start"]
    (summary,) = [e for e in events if e["event"] == "summary"]
    assert summary["model"] == str(tmp_path / "hf") and summary["params"] == start["params"]
    losses = [e["loss"] for e in events if e["event"] == "step"]
    assert len(losses) == 4 and losses[-1] < losses[0]
    # trainer.export's main in this process (its command line is test_export.py's).
    exported, event = run_export("--checkpoint", str(ckpt), "--out", str(out))
    assert exported.returncode == 0, exported.stdout
    assert event["params"] == start["params"]
    reloaded = AutoModelForCausalLM.from_pretrained(out)
    assert type(reloaded).__name__ == "Gemma2ForCausalLM"
    original = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    moved = [
        name
        for name, p in reloaded.named_parameters()
        if not torch.equal(p, original.get_parameter(name))
    ]
    assert moved  # the trained weights, not the starting ones


@pytest.mark.slow  # a 124M model: about 2 minutes on a loaded 2-core machine
def test_the_gpt2_preset_trains_from_scratch_on_2_ranks(run_trainer):
    """model_type=gpt2 (the FSDP-on-EKS document's) is a preset of the GPT-2 family: the
    transformers class from the preset's config.json, every shard drawn from the seed
    (a first loss near ln(vocab), not uninitialized memory), and the loss goes down."""
    proc, events = run_trainer(
        ["--model_type", "gpt2", "--seq_len", "16", "--train_batch_size", "1",
         "--max_steps", "2", "--log_freq", "1", "--validation_freq", "0"],
        nproc=2, timeout=420,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (start,) = [e for e in events if e["event"] == "start"]
    assert start["model_type"] == "gpt2" and start["params"] == 124_439_808
    losses = [e["loss"] for e in events if e["event"] == "step"]
    assert len(losses) == 2 and 9.5 < losses[0] < 12.5 and losses[1] < losses[0]
