"""Tokenizer, documents, the train/validation split and the packed, rank-sharded batches."""

from __future__ import annotations

import json

import pytest
import torch

from trainer.config import ConfigError
from trainer.data import (
    ByteTokenizer,
    PackedBatches,
    bundled_documents,
    eval_batches,
    load_documents,
    render_chat,
    split_tokens,
    tokenize_documents,
)

# --- tokenizer and documents ------------------------------------------------------------


def test_byte_tokenizer_round_trips_any_text():
    tok = ByteTokenizer()
    for text in ["hello world", "", "naïve café – 東京 🚆", "line\nbreak\ttab"]:
        ids = tok.encode(text)
        assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id
        assert all(0 <= i < tok.n_vocab for i in ids)
        assert tok.decode(ids) == text
    assert tok.encode("ab", bos=False, eos=False) == [97, 98]
    assert tok.encode_batch(["a", "b"]) == [tok.encode("a"), tok.encode("b")]
    assert tok.files == []


def test_bundled_corpus_is_a_few_dozen_kb_of_english():
    docs = bundled_documents()
    assert len(docs) >= 5
    size = sum(len(d.encode()) for d in docs)
    assert 30_000 <= size <= 80_000
    assert all(d.isascii() for d in docs)  # plain prose: one token per character
    assert load_documents(None) == docs


def test_dataset_reads_txt_jsonl_and_directories_recursively(tmp_path):
    (tmp_path / "a.txt").write_text("first document")
    (tmp_path / "b.jsonl").write_text(
        json.dumps({"text": "second"}) + "\n\n" + json.dumps({"text": "third"}) + "\n"
    )
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "d.txt").write_text("fourth, one level down")
    (tmp_path / "c" / "empty.txt").write_text("  \n")  # dropped: no text
    (tmp_path / "ignored.md").write_text("not data")
    (tmp_path / "dataset_info.json").write_text("{}")  # metadata next to the data
    assert load_documents(str(tmp_path)) == [
        "first document",
        "second",
        "third",
        "fourth, one level down",
    ]
    assert load_documents(str(tmp_path / "a.txt")) == ["first document"]


def test_jsonl_chat_messages_are_rendered_with_the_chat_template(tmp_path):
    chat = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is FSDP?"},
        {"role": "assistant", "content": "Sharded data parallelism."},
    ]
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"messages": chat}) + "\n" + json.dumps({"text": "plain"}) + "\n")
    rendered = (
        "<|system|>\nBe brief.\n<|user|>\nWhat is FSDP?\n<|assistant|>\nSharded data parallelism.\n"
    )
    assert render_chat(chat) == rendered
    assert load_documents(str(path)) == [rendered, "plain"]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ('{"text": "unterminated', "not valid JSON"),
        ('["a list"]', "expected a JSON object"),
        ('{"content": "no text field"}', "'text' string or a chat 'messages' list"),
        ('{"text": 42}', "'text' must be a string"),
        ('{"messages": [{"role": 1, "content": "x"}]}', r"messages\[0\].role"),
        ('{"messages": [{"role": "user"}]}', r"messages\[0\].content"),
    ],
)
def test_bad_jsonl_records_name_the_file_and_line(tmp_path, line, problem):
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps({"text": "fine"}) + "\n" + line + "\n")
    with pytest.raises(ConfigError, match=f"data.jsonl:2: .*{problem}"):
        load_documents(str(path))


def test_empty_missing_or_unsupported_datasets_are_config_errors(tmp_path):
    (tmp_path / "blank.jsonl").write_text("\n\n")
    with pytest.raises(ConfigError, match="no non-empty documents"):
        load_documents(str(tmp_path / "blank.jsonl"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no .txt or .jsonl files"):
        load_documents(str(tmp_path / "empty"))
    with pytest.raises(ConfigError, match="does not exist"):
        load_documents(str(tmp_path / "missing.jsonl"))
    (tmp_path / "data.json").write_text("[]")
    with pytest.raises(ConfigError, match="unsupported file type '.json'"):
        load_documents(str(tmp_path / "data.json"))


def test_tokenize_documents_concatenates_bos_doc_eos():
    tok = ByteTokenizer()
    tokens = tokenize_documents(["ab", "c"], tok)
    assert tokens.dtype == torch.int64
    assert tokens.tolist() == [tok.bos_id, 97, 98, tok.eos_id, tok.bos_id, 99, tok.eos_id]


def test_split_tokens_holds_out_the_tail():
    tokens = torch.arange(1000)
    train, val = split_tokens(tokens, 0.05)
    assert (len(train), len(val)) == (950, 50)
    assert torch.equal(torch.cat([train, val]), tokens)
    train, val = split_tokens(tokens, 0.0)
    assert len(train) == 1000 and len(val) == 0
    with pytest.raises(ValueError, match="validation_split"):
        split_tokens(tokens, 1.0)


# --- training batches -------------------------------------------------------------------


def stream(n: int = 5000) -> torch.Tensor:
    return torch.arange(n, dtype=torch.long)  # every token unique: easy to trace windows


def take(batches: PackedBatches, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [next(batches) for _ in range(n)]


def starts(batch: tuple[torch.Tensor, torch.Tensor]) -> list[int]:
    """The first token of each window: with stream() it identifies the window."""
    return batch[0][:, 0].tolist()


def test_batches_are_shifted_windows_of_seq_len():
    batches = PackedBatches(stream(), 16, 4, 0, 1, seed=0)
    assert iter(batches) is batches
    inputs, targets = next(batches)
    assert inputs.shape == targets.shape == (4, 16)
    assert inputs.dtype == targets.dtype == torch.int64
    assert torch.equal(inputs[:, 1:], targets[:, :-1])
    assert torch.equal(targets - inputs, torch.ones_like(inputs))  # contiguous windows


def test_same_seed_same_batches_other_seed_other_batches():
    a = take(PackedBatches(stream(), 16, 4, 1, 2, seed=7), 5)
    b = take(PackedBatches(stream(), 16, 4, 1, 2, seed=7), 5)
    c = take(PackedBatches(stream(), 16, 4, 1, 2, seed=8), 5)
    assert all(torch.equal(x[0], y[0]) for x, y in zip(a, b, strict=True))
    assert not all(torch.equal(x[0], y[0]) for x, y in zip(a, c, strict=True))


def test_ranks_read_disjoint_windows_and_cover_the_epoch_together():
    ranks = [PackedBatches(stream(), 16, 4, r, 2, seed=0) for r in range(2)]
    n = ranks[0].batches_per_epoch
    seen = [[s for batch in take(b, n) for s in starts(batch)] for b in ranks]
    assert not set(seen[0]) & set(seen[1])
    assert len(set(seen[0]) | set(seen[1])) == n * 8  # no window read twice in the epoch


def test_two_ranks_of_four_consume_the_windows_of_one_rank_of_eight():
    two = [PackedBatches(stream(), 16, 4, r, 2, seed=3) for r in range(2)]
    one = PackedBatches(stream(), 16, 8, 0, 1, seed=3)
    for _ in range(2 * one.batches_per_epoch + 1):  # across epoch rollovers too
        single = next(one)
        split = [next(b) for b in two]
        assert torch.equal(torch.cat([s[0] for s in split]), single[0])
        assert torch.equal(torch.cat([s[1] for s in split]), single[1])
    assert one.state_dict() == two[0].state_dict() == two[1].state_dict()


def test_state_dict_round_trip_resumes_exactly():
    original = PackedBatches(stream(), 16, 4, 1, 2, seed=5)
    take(original, 7)
    state = original.state_dict()
    assert set(state) == {"epoch", "position", "seed", "n_windows"}
    assert state["position"] == 7 * 8 and state["epoch"] == 0
    resumed = PackedBatches(stream(), 16, 4, 1, 2, seed=5)
    resumed.load_state_dict(json.loads(json.dumps(state)))  # plain ints survive any store
    for a, b in zip(take(original, 30), take(resumed, 30), strict=True):  # past an epoch end
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_state_from_two_ranks_resumes_on_one_rank_with_the_same_windows():
    two = [PackedBatches(stream(), 16, 4, r, 2, seed=5) for r in range(2)]
    for b in two:
        take(b, 3)
    one = PackedBatches(stream(), 16, 8, 0, 1, seed=5)
    one.load_state_dict(two[0].state_dict())
    for _ in range(4):
        assert starts(next(one)) == starts(next(two[0])) + starts(next(two[1]))


def test_state_from_another_dataset_or_seed_is_refused():
    state = PackedBatches(stream(), 16, 4, 0, 1, seed=5).state_dict()
    with pytest.raises(ValueError, match="dataset, tokenizer, seq_len or seed changed"):
        PackedBatches(stream(4000), 16, 4, 0, 1, seed=5).load_state_dict(state)
    with pytest.raises(ValueError, match="seed 5"):
        PackedBatches(stream(), 16, 4, 0, 1, seed=6).load_state_dict(state)


def test_epochs_roll_over_and_reshuffle():
    # 600 tokens, windows of 17: 34 windows, 4 global micro-batches of 8 per epoch.
    b = PackedBatches(stream(600), 16, 4, 0, 2, seed=0)
    assert (b.n_windows, b.batches_per_epoch) == (34, 4)
    epoch0 = take(b, 4)
    assert b.state_dict()["epoch"] == 0 and b.state_dict()["position"] == 32
    epoch1 = take(b, 4)  # 2 windows were left: too few for a global batch -> next epoch
    assert b.state_dict()["epoch"] == 1 and b.state_dict()["position"] == 32
    assert [starts(x) for x in epoch0] != [starts(x) for x in epoch1]
    take(b, 12)  # endless


def test_too_little_data_for_one_global_batch_is_an_error():
    with pytest.raises(ValueError, match="dataset too small.*world_size x train_batch_size = 8"):
        PackedBatches(stream(100), 16, 4, 0, 2, seed=0)


def test_bundled_corpus_feeds_the_default_job():
    tokens = tokenize_documents(bundled_documents(), ByteTokenizer())
    train, _ = split_tokens(tokens, 0.05)
    b = PackedBatches(train, 128, 8, 0, 2, seed=0)
    assert b.batches_per_epoch >= 10


# --- evaluation batches -----------------------------------------------------------------


def test_eval_batches_are_fixed_and_equal_in_number_on_every_rank():
    val = stream(17 * 21)  # 21 windows of 17: 10 per rank of 2 -> 2 batches of 4 (not 3)
    per_rank = [eval_batches(val, 16, 4, r, 2, max_batches=10) for r in range(2)]
    assert [len(b) for b in per_rank] == [2, 2]
    assert [starts(b) for b in per_rank[0]] == [[0, 34, 68, 102], [136, 170, 204, 238]]
    assert [starts(b) for b in per_rank[1]] == [[17, 51, 85, 119], [153, 187, 221, 255]]
    assert all(torch.equal(b[1][:, :-1], b[0][:, 1:]) for b in per_rank[0])
    assert len(eval_batches(val, 16, 4, 0, 2, max_batches=1)) == 1
    # 2 x 4 and 1 x 8 evaluate the same windows in each global batch.
    one = eval_batches(val, 16, 8, 0, 1, max_batches=10)
    assert [sorted(starts(b)) for b in one] == [
        sorted(starts(a) + starts(b)) for a, b in zip(*per_rank, strict=True)
    ]


def test_eval_batches_are_empty_when_the_held_out_tail_is_too_small():
    assert eval_batches(stream(17 * 7), 16, 4, 0, 2, max_batches=4) == []
    assert eval_batches(stream(0), 16, 4, 1, 2, max_batches=4) == []
