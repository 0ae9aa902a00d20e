"""Tokenizer, corpus and the packed, rank-sharded batches."""

from __future__ import annotations

import json

import pytest
import torch

from trainer.data import (
    ByteTokenizer,
    PackedBatches,
    bundled_documents,
    load_documents,
    tokenize_documents,
)


def test_tokenizer_round_trips_any_text():
    tok = ByteTokenizer()
    for text in ["hello world", "", "naïve café – 東京 🚆", "line\nbreak\ttab"]:
        ids = tok.encode(text)
        assert ids[0] == tok.BOS and ids[-1] == tok.EOS
        assert all(0 <= i < tok.n_vocab for i in ids)
        assert tok.decode(ids) == text
    assert tok.encode("ab", bos=False, eos=False) == [97, 98]


def test_bundled_corpus_is_a_few_dozen_kb_of_english():
    docs = bundled_documents()
    assert len(docs) >= 5
    size = sum(len(d.encode()) for d in docs)
    assert 30_000 <= size <= 80_000
    assert all(d.isascii() for d in docs)  # plain prose: one token per character


def test_dataset_path_reads_txt_jsonl_and_directories(tmp_path):
    (tmp_path / "a.txt").write_text("first document")
    (tmp_path / "b.jsonl").write_text(
        json.dumps({"text": "second"}) + "\n\n" + json.dumps({"text": "third"}) + "\n"
    )
    (tmp_path / "ignored.md").write_text("not data")
    assert load_documents(str(tmp_path)) == ["first document", "second", "third"]
    assert load_documents(str(tmp_path / "a.txt")) == ["first document"]
    assert load_documents(None) == bundled_documents()


def stream(n: int = 5000) -> torch.Tensor:
    return torch.arange(n, dtype=torch.long)  # every token unique: easy to trace windows


def take(batches: PackedBatches, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    it = iter(batches)
    return [next(it) for _ in range(n)]


def test_batches_are_shifted_windows_of_seq_len():
    ((inputs, targets),) = take(PackedBatches(stream(), 16, 4, 0, 1, seed=0), 1)
    assert inputs.shape == targets.shape == (4, 16)
    assert torch.equal(inputs[:, 1:], targets[:, :-1])
    assert torch.equal(targets - inputs, torch.ones_like(inputs))  # contiguous windows


def test_ranks_read_disjoint_windows_in_an_epoch():
    per_rank = []
    for rank in range(2):
        b = PackedBatches(stream(), 16, 4, rank, 2, seed=0)
        seen = torch.cat([x[:, 0] for x, _ in take(b, b.batches_per_epoch)])
        per_rank.append(set(seen.tolist()))
    assert per_rank[0] and per_rank[1]
    assert not per_rank[0] & per_rank[1]


def test_same_seed_same_batches_other_seed_other_batches():
    a = take(PackedBatches(stream(), 16, 4, 1, 2, seed=7), 5)
    b = take(PackedBatches(stream(), 16, 4, 1, 2, seed=7), 5)
    c = take(PackedBatches(stream(), 16, 4, 1, 2, seed=8), 5)
    assert all(torch.equal(x[0], y[0]) for x, y in zip(a, b, strict=True))
    assert not all(torch.equal(x[0], y[0]) for x, y in zip(a, c, strict=True))


def test_epochs_reshuffle_and_keep_going():
    b = PackedBatches(stream(600), 16, 4, 0, 2, seed=0)
    epoch0 = take(b, b.batches_per_epoch)
    after = take(b, 3 * b.batches_per_epoch)  # endless
    assert not torch.equal(epoch0[0][0], after[b.batches_per_epoch][0])


def test_too_little_data_for_one_batch_per_rank_is_an_error():
    with pytest.raises(ValueError, match="dataset too small"):
        PackedBatches(stream(100), 16, 4, 0, 2, seed=0)


def test_bundled_corpus_feeds_the_default_job():
    tokens = tokenize_documents(bundled_documents(), ByteTokenizer())
    b = PackedBatches(tokens, 128, 8, 0, 2, seed=0)
    assert b.batches_per_epoch >= 10
