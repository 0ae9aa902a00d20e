"""Datasets and tokenizers from where users keep them: local dirs, S3 (moto), the hub.

The tokenizer.json files are real ones, trained here with the `tokenizers` library.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from trainer.config import ConfigError
from trainer.data import load_documents, tokenize_documents
from trainer.tokenizer import ByteTokenizer, HFTokenizer, load_tokenizer

SENTENCES = [
    "The lighthouse keeper climbed the stairs at dusk.",
    "Sharded data parallelism splits parameters across ranks.",
    "A kettle whistled while the rain kept falling on the garden.",
    "Trains left the station every twenty minutes, café or not.",
]
CHAT = [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."}]


def build_tokenizer(directory: Path, *, with_config: bool = False) -> Path:
    """A small byte-level BPE with <pad>, <s>, </s>; saved as directory/tokenizer.json."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # any text encodes
        show_progress=False,
    )
    tok.train_from_iterator(SENTENCES, trainer)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "tokenizer.json"
    tok.save(str(path))
    if with_config:
        (directory / "tokenizer_config.json").write_text(
            json.dumps({"bos_token": "<s>", "eos_token": {"content": "</s>"}})
        )
    return path


def write_dataset(directory: Path) -> list[str]:
    """Two JSONL files (one nested) and a .txt; returns the documents in load order."""
    (directory / "part-b").mkdir(parents=True)
    (directory / "part-a.jsonl").write_text(
        "\n".join(json.dumps({"text": s}) for s in SENTENCES[:2]) + "\n"
    )
    (directory / "part-b" / "chat.jsonl").write_text(json.dumps({"messages": CHAT}) + "\n")
    (directory / "part-c.txt").write_text(SENTENCES[2])
    return [*SENTENCES[:2], "<|user|>\nHi?\n<|assistant|>\nHello.\n", SENTENCES[2]]


def check_tokenizer(tok: HFTokenizer | ByteTokenizer) -> None:
    assert isinstance(tok, HFTokenizer)
    rust = Tokenizer.from_file(str(tok.files[0]))
    assert (tok.bos_id, tok.eos_id) == (rust.token_to_id("<s>"), rust.token_to_id("</s>"))
    assert tok.n_vocab == rust.get_vocab_size(with_added_tokens=True)
    for text in [*SENTENCES, "unseen wörds ✓ 123"]:
        ids = tok.encode(text)
        assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id
        assert all(0 <= i < tok.n_vocab for i in ids)
        assert tok.decode(ids) == text
        assert tok.encode(text, bos=False, eos=False) == ids[1:-1]
    assert tok.encode_batch(SENTENCES[:2]) == [tok.encode(s) for s in SENTENCES[:2]]


# --- local ------------------------------------------------------------------------------


def test_local_dataset_dir_and_tokenizer_dir(tmp_path):
    expected = write_dataset(tmp_path / "data")
    build_tokenizer(tmp_path / "tok", with_config=True)
    assert load_documents(str(tmp_path / "data")) == expected
    tok = load_tokenizer(str(tmp_path / "tok"))
    check_tokenizer(tok)
    assert [p.name for p in tok.files] == ["tokenizer.json", "tokenizer_config.json"]
    tokens = tokenize_documents(expected, tok)
    assert tokens.tolist() == [i for doc in expected for i in tok.encode(doc)]


def test_local_tokenizer_file_without_bos_or_eos_adds_none(tmp_path):
    tok = Tokenizer(models.WordLevel({"hello": 0, "world": 1, "[UNK]": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(tmp_path / "plain.json"))
    loaded = load_tokenizer(str(tmp_path / "plain.json"))
    assert isinstance(loaded, HFTokenizer)
    assert (loaded.bos_id, loaded.eos_id, loaded.n_vocab) == (None, None, 3)
    assert loaded.encode("hello world") == [0, 1]
    assert loaded.files == [tmp_path / "plain.json"]


def test_tokenizer_config_names_the_special_tokens(tmp_path):
    # Declaring "</s>" as BOS and "<s>" as EOS, the reverse of the guess from the
    # candidate list, proves the model's declared tokens win.
    path = build_tokenizer(tmp_path)
    (tmp_path / "special_tokens_map.json").write_text(
        json.dumps({"bos_token": "</s>", "eos_token": "<s>"})
    )
    tok = load_tokenizer(str(path))
    rust = Tokenizer.from_file(str(path))
    assert (tok.bos_id, tok.eos_id) == (rust.token_to_id("</s>"), rust.token_to_id("<s>"))


def test_byte_tokenizer_is_the_default():
    assert isinstance(load_tokenizer(None), ByteTokenizer)


def test_bad_tokenizer_specs_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_tokenizer(str(tmp_path / "missing" / "tokenizer.json"))
    with pytest.raises(ConfigError, match="has no tokenizer.json"):
        load_tokenizer(str(tmp_path))
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not a valid tokenizer.json"):
        load_tokenizer(str(tmp_path))


# --- S3 (moto) --------------------------------------------------------------------------


@pytest.fixture
def bucket(moto_server, tmp_path, monkeypatch):
    """A fresh bucket; downloads go to a per-test cache dir, never ~/.cache."""
    import boto3

    monkeypatch.setenv("FSDP_EKS_CACHE_DIR", str(tmp_path / "cache"))
    name = f"data-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=name)
    return name


def upload_tree(local: Path, bucket: str, prefix: str) -> None:
    import boto3

    s3 = boto3.client("s3")
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        s3.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(local).as_posix()}")


@pytest.mark.integration
def test_s3_dataset_prefix_and_object(bucket, tmp_path):
    expected = write_dataset(tmp_path / "data")
    upload_tree(tmp_path / "data", bucket, "datasets/mix")
    assert load_documents(f"s3://{bucket}/datasets/mix/") == expected
    assert load_documents(f"s3://{bucket}/datasets/mix") == expected
    assert load_documents(f"s3://{bucket}/datasets/mix/part-a.jsonl") == SENTENCES[:2]
    with pytest.raises(ConfigError, match="no objects there"):
        load_documents(f"s3://{bucket}/datasets/nothing/")


@pytest.mark.integration
def test_s3_tokenizer_file_and_dir_uris(bucket, tmp_path):
    build_tokenizer(tmp_path / "tok", with_config=True)
    upload_tree(tmp_path / "tok", bucket, "tok")
    # A model directory: only the tokenizer files may be fetched, never the weights.
    import boto3

    boto3.client("s3").put_object(Bucket=bucket, Key="tok/model.safetensors", Body=b"weights")

    from_file = load_tokenizer(f"s3://{bucket}/tok/tokenizer.json")
    from_dir = load_tokenizer(f"s3://{bucket}/tok/")
    for tok in (from_file, from_dir):
        check_tokenizer(tok)
        assert [p.name for p in tok.files] == ["tokenizer.json", "tokenizer_config.json"]
        assert all(p.is_file() for p in tok.files)
    cache = tmp_path / "cache"
    assert not any(p.name == "model.safetensors" for p in cache.rglob("*"))
    with pytest.raises(ConfigError, match="no tokenizer at"):
        load_tokenizer(f"s3://{bucket}/elsewhere/")


# --- Hugging Face hub -------------------------------------------------------------------


def test_hub_tokenizer_that_cannot_be_fetched_points_to_local_files(monkeypatch):
    # Offline mode makes the real hub client fail at once instead of retrying DNS.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match="pass a local/s3 tokenizer.json"):
        load_tokenizer("no-such-org/no-such-tokenizer")
