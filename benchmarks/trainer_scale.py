"""Trainer at scale, on CPU (issue 23's closing measurements).

1. Peak RSS per rank (2 ranks, gloo) bringing up a ~1B-parameter HF-format Llama
   (random weights written here, bf16 safetensors): before = today's full build on
   every rank + load_hf_weights into the whole model, after = meta-device build,
   fully_shard, materialize the shard, sharded (row-slice) load. Reported against the
   fp32 shard size (params * 4 / world).
2. A text corpus (--corpus_mb, default 1024): time to the first batch on the first
   start (tokenize into the token file) and the second (memory map), and today's
   in-memory tokenization for comparison when --with_before (needs ~40x the corpus
   in RAM per rank with the byte tokenizer).

    python benchmarks/trainer_scale.py [--corpus_mb 1024] [--skip_rss] [--skip_corpus]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer import hf  # noqa: E402
from trainer.config import ModelConfig  # noqa: E402
from trainer.device import mixed_precision_policy  # noqa: E402
from trainer.materialize import build_meta_model, materialize  # noqa: E402
from trainer.model import Transformer, num_params  # noqa: E402
from trainer.parallel import apply_fsdp, build_mesh  # noqa: E402

WORLD = 2
LLAMA_1B = ModelConfig(
    dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, vocab_size=32000,
    ffn_hidden_dim=8192, max_seq_len=2048,
)  # fmt: skip
# --quick (the test suite runs it, to prove the benchmark runs, not to measure): a
# ~0.2M-parameter Llama and a 1 MB corpus, once; the ranks forked, not spawned (a spawned
# rank imports torch and the trainer again: most of a quick run; a forked one starts with
# this process's memory, so its peak RSS says nothing).
QUICK = "--quick" in sys.argv
SMALL = ModelConfig(
    dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=512,
    ffn_hidden_dim=192, max_seq_len=64,
)  # fmt: skip
MODEL = SMALL if QUICK else LLAMA_1B


def write_hf_checkpoint(out: Path) -> int:
    """Random bf16 weights in HF layout, written one tensor at a time."""
    from safetensors.torch import save_file

    out.mkdir(parents=True, exist_ok=True)
    meta = build_meta_model(MODEL, rope_len=16)
    gen = torch.Generator().manual_seed(0)
    weight_map, shard, size, index = {}, {}, 0, 1
    names = [n for n, _ in meta.named_parameters()]
    for name, param in meta.named_parameters():
        hf_name = name if name.startswith("lm_head.") else f"model.{name}"
        shard[hf_name] = (torch.randn(param.shape, generator=gen) * 0.02).to(torch.bfloat16)
        size += shard[hf_name].numel() * 2
        if size > 2**30 or name == names[-1]:
            file = f"model-{index:05d}.safetensors"
            save_file(shard, out / file, metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(shard, file))
            shard, size, index = {}, 0, index + 1
    (out / hf.SAFETENSORS_INDEX).write_text(json.dumps({"weight_map": weight_map}))
    (out / "config.json").write_text(json.dumps(hf.hf_config_from_model(MODEL)))
    return num_params(meta)


def _rss_worker(rank: int, store: str, mode: str, hf_dir: str, out: str) -> None:
    dist.init_process_group("gloo", store=dist.FileStore(store, WORLD), rank=rank,
                            world_size=WORLD)  # fmt: skip
    start = time.perf_counter()
    if mode == "before":
        torch.manual_seed(0)
        model = Transformer(MODEL, rope_len=16)
        hf.load_hf_weights(model, hf_dir)
        apply_fsdp(model, build_mesh("cpu", "full", WORLD, WORLD),
                   mixed_precision_policy("cpu", False), True)  # fmt: skip
    else:
        model = build_meta_model(MODEL, rope_len=16)
        apply_fsdp(model, build_mesh("cpu", "full", WORLD, WORLD),
                   mixed_precision_policy("cpu", False), True)  # fmt: skip
        materialize(model, torch.device("cpu"), torch.device("cpu"))
        hf.load_hf_weights(model, hf_dir)
    seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Path(out, f"{mode}-{rank}.json").write_text(
        json.dumps({"peak_rss_mb": peak_mb, "seconds": seconds})
    )
    dist.barrier()
    dist.destroy_process_group()


def measure_rss(work: Path) -> dict:
    hf_dir = work / "llama-1b"
    params = write_hf_checkpoint(hf_dir)
    shard_mb = params * 4 / WORLD / 2**20
    result: dict = {"params": params, "fp32_shard_mb": round(shard_mb)}
    for mode in ("before", "after"):
        store = work / f"store-{mode}"
        mp.start_processes(_rss_worker, args=(str(store), mode, str(hf_dir), str(work)),
                           nprocs=WORLD, start_method="fork" if QUICK else "spawn")  # fmt: skip
        ranks = [json.loads((work / f"{mode}-{r}.json").read_text()) for r in range(WORLD)]
        peak = max(r["peak_rss_mb"] for r in ranks)
        result[mode] = {"peak_rss_mb_per_rank": [round(r["peak_rss_mb"]) for r in ranks],
                        "seconds": [round(r["seconds"], 1) for r in ranks],
                        "peak_over_shard": round(peak / shard_mb, 2)}  # fmt: skip
    return result


def _corpus(path: Path, megabytes: int) -> None:
    """A .jsonl corpus of ~64 KB documents."""
    line = "The quick brown fox jumps over the lazy dog; sharded data parallel training. "
    record = json.dumps({"text": line * 840}) + "\n"
    with path.open("w") as fh:
        for _ in range(megabytes * 2**20 // len(record)):
            fh.write(record)


def measure_corpus(work: Path, megabytes: int) -> dict:
    from trainer.data import PackedBatches, load_documents, split_tokens
    from trainer.token_cache import cached_tokens, token_file
    from trainer.tokenizer import ByteTokenizer

    corpus = work / "corpus.jsonl"
    _corpus(corpus, megabytes)
    tok = ByteTokenizer()
    result = {"corpus_mb": round(corpus.stat().st_size / 2**20)}
    for start in ("first", "second"):
        t0 = time.perf_counter()
        path = token_file(str(corpus), None, tok, None, root=work / "cache")
        tokens = cached_tokens(path, lambda: load_documents(str(corpus)), tok, 0, 1,
                               lambda: None)  # fmt: skip
        train, _ = split_tokens(tokens, 0.05)
        next(PackedBatches(train, 2048, 8, 0, 1, 0))
        result[f"{start}_start_to_first_batch_s"] = round(time.perf_counter() - t0, 2)
    result["token_file_mb"] = round(path.stat().st_size / 2**20)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus_mb", type=int, default=1024)
    parser.add_argument("--skip_rss", action="store_true")
    parser.add_argument("--skip_corpus", action="store_true")
    parser.add_argument("--quick", action="store_true", help="see QUICK")
    args = parser.parse_args()
    if args.quick:
        args.corpus_mb = 1
    with tempfile.TemporaryDirectory(prefix="trainer-scale-") as tmp:
        work = Path(tmp)
        out = {}
        if not args.skip_rss:
            out["hf_load_rss"] = measure_rss(work)
        if not args.skip_corpus:
            out["corpus"] = measure_corpus(work, args.corpus_mb)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
