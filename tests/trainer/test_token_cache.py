"""The token file: the same stream and the same batches (also after a mid-epoch
resume) as tokenizing in memory, built by 2 ranks' slices, reused without reading
the documents again, and rebuilt when the dataset changes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from trainer.data import PackedBatches, load_documents, split_tokens, tokenize_documents
from trainer.token_cache import cached_tokens, join_parts, open_tokens, token_file, write_part
from trainer.tokenizer import ByteTokenizer

SEQ, BATCH, SEED = 16, 2, 3


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "data.jsonl"
    rows = [{"text": f"document {i}: " + "words and more words " * (i % 7 + 1)} for i in range(60)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def built_by_two_ranks(dataset: str, tmp_path) -> np.ndarray:
    tok = ByteTokenizer()
    path = token_file(dataset, None, tok, None, root=tmp_path / "cache")
    docs = load_documents(dataset)
    for rank in (1, 0):  # each rank its slice, then local rank 0 joins
        write_part(path, docs, tok, rank, 2)
    join_parts(path, 2)
    assert path.suffix == ".uint16" and not list(path.parent.glob("*.part*"))
    return open_tokens(path)


def test_token_file_holds_todays_stream(dataset, tmp_path):
    today = tokenize_documents(load_documents(dataset), ByteTokenizer())
    mapped = built_by_two_ranks(dataset, tmp_path)
    assert isinstance(mapped, np.memmap)
    assert torch.equal(torch.from_numpy(mapped.astype(np.int64)), today)


def batches(tokens, rank: int) -> PackedBatches:
    train, _ = split_tokens(tokens, 0.05)
    return PackedBatches(train, SEQ, BATCH, rank, 2, SEED)


@pytest.mark.parametrize("rank", [0, 1])
def test_memmap_batches_and_a_mid_epoch_resume_equal_todays(dataset, tmp_path, rank):
    today = batches(tokenize_documents(load_documents(dataset), ByteTokenizer()), rank)
    mapped_tokens = built_by_two_ranks(dataset, tmp_path)
    mapped = batches(mapped_tokens, rank)
    assert mapped.batches_per_epoch > 4  # so that step 3 is mid-epoch
    for _ in range(3):
        for a, b in zip(next(today), next(mapped), strict=True):
            assert torch.equal(a, b)
    resumed = batches(mapped_tokens, rank)
    resumed.load_state_dict(mapped.state_dict())
    for _ in range(2 * today.batches_per_epoch):  # on into the next epoch
        for a, b in zip(next(today), next(resumed), strict=True):
            assert torch.equal(a, b)


def test_a_second_start_reads_no_documents_and_a_changed_dataset_rebuilds(dataset, tmp_path):
    tok, root = ByteTokenizer(), tmp_path / "cache"
    path = token_file(dataset, None, tok, None, root=root)

    def read_once():
        return load_documents(dataset)

    def must_not_read():
        raise AssertionError("the documents were read again")

    first = cached_tokens(path, read_once, tok, 0, 1, lambda: None)
    again = cached_tokens(path, must_not_read, tok, 0, 1, lambda: None)
    assert np.array_equal(first, again)
    with open(dataset, "a") as fh:
        fh.write(json.dumps({"text": "one more"}) + "\n")
    assert token_file(dataset, None, tok, None, root=root) != path
    assert token_file(dataset, None, tok, "other-tokenizer", root=root) != path
