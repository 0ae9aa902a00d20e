"""Meta-device init and sharded HF loading (2 ranks, gloo): every rank allocates only
its shard, yet the gathered weights and the logits equal those of today's full CPU
build (random init with the seed, or load_hf_weights into the whole model)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from tests.trainer.conftest import spawn
from trainer import hf
from trainer.config import ModelConfig
from trainer.materialize import build_meta_model, init_random, materialize
from trainer.model import Transformer
from trainer.parallel import apply_fsdp, build_mesh

SEED = 7
CPU = torch.device("cpu")


def configs() -> list[ModelConfig]:
    # vocab 97: rows that do not split evenly over 2 ranks.
    small = dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=97, max_seq_len=32)
    return [ModelConfig(**small), ModelConfig(**small, tie_word_embeddings=True)]


def full_model(cfg: ModelConfig, hf_dir: str | None) -> Transformer:
    """Today's way: the whole model on CPU, seeded, HF weights copied in whole."""
    torch.manual_seed(SEED)
    model = Transformer(cfg, rope_len=16)
    if hf_dir:
        hf.load_hf_weights(model, hf_dir)
    return model


def sharded_model(cfg: ModelConfig, hf_dir: str | None) -> Transformer:
    model = build_meta_model(cfg, rope_len=16)
    apply_fsdp(model, build_mesh("cpu", "full", 2, 2), _no_cast(), True)
    materialize(model, CPU, CPU)
    if hf_dir:
        hf.load_hf_weights(model, hf_dir)
    else:
        init_random(model, SEED)
    return model


def _no_cast():
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy()


def _worker(rank: int, store_path: str, sources: dict[str, list[str | None]], done: str) -> None:
    """For each source in turn, hf_dirs[i]: the HF export configs()[i] loads, or None for
    the random init. Rank 0 marks a source done (file `done`.SOURCE) once both ranks
    passed it; the first failure ends the spawn."""
    store = dist.FileStore(store_path, 2)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    try:
        for source, hf_dirs in sources.items():
            _check(hf_dirs)
            dist.barrier()
            if rank == 0:
                Path(f"{done}.{source}").touch()
    finally:
        dist.destroy_process_group()


def _check(hf_dirs: list[str | None]) -> None:
    tokens = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(1))
    for cfg, hf_dir in zip(configs(), hf_dirs, strict=True):
        ref = full_model(cfg, hf_dir)
        got = sharded_model(cfg, hf_dir)
        for name, param in got.named_parameters():
            assert param.to_local().numel() < param.numel(), f"{name}: held whole"
            assert torch.equal(param.full_tensor(), ref.get_parameter(name)), name
        with torch.no_grad():
            torch.testing.assert_close(got(tokens), ref(tokens), rtol=0, atol=0)
        if hf_dir is None:
            _device_init_is_the_same_at_every_world_size(cfg)


def _device_init_is_the_same_at_every_world_size(cfg: ModelConfig) -> None:
    """The GPU path's init (each rank draws only its rows, on its device): the shards of
    2 ranks are the rows one whole model on 1 rank draws."""
    whole = build_meta_model(cfg, rope_len=16)
    materialize(whole, CPU, CPU)
    init_random(whole, SEED, on_device=True)
    sharded = build_meta_model(cfg, rope_len=16)
    apply_fsdp(sharded, build_mesh("cpu", "full", 2, 2), _no_cast(), True)
    materialize(sharded, CPU, CPU)
    init_random(sharded, SEED, on_device=True)
    for name, param in sharded.named_parameters():
        assert torch.equal(param.full_tensor(), whole.get_parameter(name)), name
    embed = whole.embed_tokens.weight
    assert abs(embed.std().item() - 0.02) < 0.002 and abs(embed.mean().item()) < 0.002
    assert torch.equal(whole.norm.weight, torch.ones_like(whole.norm.weight))


SOURCES = ["random", "hf"]


@pytest.fixture(scope="module")
def checked(tmp_path_factory) -> tuple[Path, str | None]:
    """Both sources checked by one spawn of 2 ranks (forked from the fork server):
    the done marks' prefix, and the spawn's error if a source failed."""
    root = tmp_path_factory.mktemp("meta")
    hf_dirs: list[str | None] = []
    for i, cfg in enumerate(configs()):
        torch.manual_seed(100 + i)  # other weights than the seeded init's
        out = root / f"hf{i}"
        # Several safetensors files: the loader reads slices across an index.
        hf.save_hf(Transformer(cfg).state_dict(), cfg, out, max_shard_bytes=40_000)
        hf_dirs.append(str(out))
    sources = {"random": [None] * len(configs()), "hf": hf_dirs}
    assert list(sources) == SOURCES
    try:
        spawn(_worker, (str(root / "store"), sources, str(root / "done")), 2)
    except Exception as exc:  # noqa: BLE001 (each test reports it for its own source)
        return root / "done", f"{type(exc).__name__}: {exc}"
    return root / "done", None


@pytest.mark.parametrize("source", SOURCES)
def test_meta_init_equals_the_full_cpu_build_on_2_ranks(checked, source):
    done, error = checked
    # A source that failed, or was not reached after an earlier one failed, has no mark.
    assert Path(f"{done}.{source}").exists(), error
