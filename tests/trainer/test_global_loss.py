"""The loss is normalised by the global count of trained-on targets: 1 rank x 8,
2 ranks x 4 and 1 rank x 4 with 2 accumulation steps see the same windows and give the
same loss and gradient norm, step after step, for masked chat data (--train_on
assistant) and for unmasked data. Real FSDP2 on gloo with the trainer's own pieces
(build, parallelize, init, AdamW, train_step, clipping, agree)."""

from __future__ import annotations

import json
import random

import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule

from tests.trainer.conftest import spawn
from tests.trainer.test_chat_template import template_tokenizer
from trainer.config_loader import load_config
from trainer.data import (
    IGNORE_INDEX,
    PackedBatches,
    assistant_segments,
    chat_renderer,
    load_documents,
    tokenize_with_mask,
)
from trainer.distributed import DistEnv, StopRequest
from trainer.tokenizer import load_tokenizer

STEPS = 3
WORDS = ["hi", "there", "hello", "user", "assistant"]
SPLITS = [(1, 8, 1), (2, 4, 1), (1, 4, 2)]  # (ranks, batch per rank, accumulation)


def chats(n: int) -> list[list[dict]]:
    """Chats whose turns vary in length, so windows hold different shares of
    assistant tokens (a rank's micro-batch may hold none)."""
    rng = random.Random(0)

    def words(lo: int, hi: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))

    return [
        [{"role": "user", "content": words(1, 30)}, {"role": "assistant", "content": words(1, 6)}]
        for _ in range(n)
    ]


def _worker(rank: int, world: int, store: str, args: list, out: str) -> None:
    tok_dir, data, batch, accum = args
    dist.init_process_group("gloo", store=dist.FileStore(store, world), rank=rank, world_size=world)
    try:
        found = {masked: _steps(rank, world, tok_dir, data, masked, batch, accum)
                 for masked in (True, False)}  # fmt: skip
        if rank == 0:
            with open(out, "w") as f:
                json.dump({"assistant": found[True], "all": found[False]}, f)
    finally:
        dist.destroy_process_group()


def _steps(
    rank: int, world: int, tok_dir: str, data: str, masked: bool, batch: int, accum: int
) -> dict:
    """STEPS optimizer steps; (loss, grad norm) of each and each micro-batch's count of
    trained-on targets per rank."""
    from trainer import build
    from trainer import step as one_step

    flags = ["--seq_len", "16", "--train_batch_size", str(batch), "--grad_accum_steps",
             str(accum), "--tokenizer", tok_dir, "--warmup_steps", "0",
             "--max_grad_norm", "1.0", "--learning_rate", "1e-2"]  # fmt: skip
    cfg = load_config(flags, environ={})
    tok = load_tokenizer(tok_dir)
    docs = load_documents(data, chat=assistant_segments(chat_renderer(tok)))
    ids, mask = tokenize_with_mask(docs, tok)
    batches = PackedBatches(ids, 16, batch, rank, world, seed=1, mask=mask if masked else None)
    env = DistEnv(rank, world, rank, world, launched=True)
    model = build.build_model(cfg)
    device = torch.device("cpu")
    build.parallelize(model, cfg, device, env)
    build.init_weights(model, cfg, device, resuming=False)
    optimizer = build.build_optimizer(model, cfg, "cpu")
    # Gradients are summed over ranks as plain SUM collectives (the loss carries 1/N).
    states = {id(s): s for m in model.modules() if isinstance(m, FSDPModule)
              for s in [m._get_fsdp_state()]}  # fmt: skip
    assert len(states) == cfg.model.n_layers + 3  # embedding, blocks, [norm, lm_head], root
    for state in states.values():
        for group in state._fsdp_param_groups:
            assert group.gradient_divide_factor == 1.0 and group.force_sum_reduction_for_comms
    tokens = batch * world * accum * 16
    counts, results = [], []
    for step in range(1, STEPS + 1):
        state = batches.state_dict()
        counts.append([int(y.ne(IGNORE_INDEX).sum()) for _, y in
                       (next(batches) for _ in range(accum))])  # fmt: skip
        batches.load_state_dict(state)  # the step below reads the same micro-batches
        loss = one_step.train_step(model, batches, accum, device, tokens)
        norm = one_step.grad_norm_of(model, 1.0)
        agreement, _ = one_step.agree(step, loss, norm, StopRequest(), None)
        agreed = agreement.resolve()
        results.append((agreed.loss, agreed.grad_norm))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    gathered: list = [None] * world
    dist.all_gather_object(gathered, counts)
    return {"results": results, "counts": gathered}


def run_split(tmp_path, name: str, world: int, args: list) -> dict:
    out = tmp_path / f"{name}.json"
    worker_args = (world, str(tmp_path / f"{name}.store"), args, str(out))
    if world == 1:  # a world of one in this process: a process of its own imports torch again
        _worker(0, *worker_args)
    else:
        spawn(_worker, worker_args, world)
    return json.loads(out.read_text())


def test_every_world_size_and_accumulation_split_gives_the_same_step(tmp_path):
    tok_dir = tmp_path / "tok"
    template_tokenizer(tok_dir)
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps({"messages": c}) + "\n" for c in chats(300)))
    found = {
        f"{w}x{b}/{a}": run_split(tmp_path, f"{w}x{b}a{a}", w, [str(tok_dir), str(data), b, a])
        for w, b, a in SPLITS
    }
    for data_kind in ("assistant", "all"):
        runs = {name: run[data_kind] for name, run in found.items()}
        reference = runs["1x8/1"]["results"]
        for name, run in runs.items():
            for step, ((loss, norm), (ref_loss, ref_norm)) in enumerate(
                zip(run["results"], reference, strict=True), start=1
            ):
                assert loss == pytest.approx(ref_loss, abs=1e-5), (data_kind, name, step)
                assert norm == pytest.approx(ref_norm, abs=1e-5), (data_kind, name, step)
    # The masked splits really do see unequal shares of trained-on targets: a mean per
    # rank or per micro-batch would have weighed them differently.
    masked = {name: run["assistant"]["counts"] for name, run in found.items()}
    assert any(r0 != r1 for r0, r1 in zip(*masked["2x4/1"], strict=True))
    assert any(a != b for a, b in masked["1x4/2"][0])
