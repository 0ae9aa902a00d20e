"""Tokenizer, corpus loading and packed, rank-sharded batches.

The tokenizer is byte-level (UTF-8 bytes + a few special ids), so any text works and
there is no vocabulary file to ship. Documents are tokenized as BOS + bytes + EOS,
concatenated into one stream and cut into fixed windows of seq_len + 1 tokens
(inputs are window[:-1], targets window[1:]); no padding is ever needed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import torch


class ByteTokenizer:
    """ids 0-255 are raw bytes; specials follow."""

    BOS = 256
    EOS = 257
    PAD = 258
    n_vocab = 259  # the model's vocab_size must be >= this (presets use 512)

    def encode(self, text: str, bos: bool = True, eos: bool = True) -> list[int]:
        ids = list(text.encode("utf-8"))
        return ([self.BOS] if bos else []) + ids + ([self.EOS] if eos else [])

    def decode(self, ids: list[int]) -> str:
        # Special ids are dropped; a byte sequence cut mid-character decodes to U+FFFD.
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


def bundled_documents() -> list[str]:
    """The small English corpus shipped in trainer/corpus (one document per file)."""
    corpus = resources.files("trainer").joinpath("corpus")
    files = sorted((f for f in corpus.iterdir() if f.name.endswith(".txt")), key=lambda f: f.name)
    return [f.read_text(encoding="utf-8") for f in files]


def _read_file(path: Path) -> list[str]:
    if path.suffix == ".jsonl":
        docs = []
        with path.open(encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    docs.append(json.loads(line)["text"])
        return docs
    return [path.read_text(encoding="utf-8")]


def load_documents(path: str | None) -> list[str]:
    """Documents from the bundled corpus (path None), a .txt/.jsonl file, or a directory.

    A .txt file is one document; a .jsonl file has one {"text": ...} object per line.
    """
    if path is None:
        return bundled_documents()
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix in (".txt", ".jsonl"))
        return [doc for f in files for doc in _read_file(f)]
    return _read_file(p)


def tokenize_documents(docs: list[str], tokenizer: ByteTokenizer) -> torch.Tensor:
    ids: list[int] = []
    for doc in docs:
        ids.extend(tokenizer.encode(doc))
    return torch.tensor(ids, dtype=torch.long)


class PackedBatches:
    """Endless (inputs, targets) batches of shape (batch_size, seq_len) for one rank.

    Every epoch the stream is cut at a new random offset and the windows are shuffled
    with a generator seeded by (seed, epoch), identically on all ranks; rank r then
    takes windows r, r + world_size, ... so ranks never see the same window in an
    epoch, and all ranks get the same number of batches (they must step in lockstep).
    """

    def __init__(
        self,
        tokens: torch.Tensor,
        seq_len: int,
        batch_size: int,
        rank: int,
        world_size: int,
        seed: int,
    ) -> None:
        self.tokens = tokens
        self.window = seq_len + 1
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        # Windows that fit whatever the offset (offset < window).
        self.n_windows = max(0, (len(tokens) - seq_len) // self.window)
        self.batches_per_epoch = (self.n_windows // world_size) // batch_size
        if self.batches_per_epoch == 0:
            raise ValueError(
                f"dataset too small: {len(tokens)} tokens give {self.n_windows} windows of "
                f"{self.window}, fewer than world_size x train_batch_size = "
                f"{world_size * batch_size}"
            )

    def epoch_batches(self, epoch: int) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        offset = int(torch.randint(0, self.window, (1,), generator=gen))
        order = torch.randperm(self.n_windows, generator=gen)
        mine = order[self.rank :: self.world_size]
        for b in range(self.batches_per_epoch):
            idx = mine[b * self.batch_size : (b + 1) * self.batch_size]
            starts = offset + idx * self.window
            rows = torch.stack([self.tokens[s : s + self.window] for s in starts.tolist()])
            yield rows[:, :-1], rows[:, 1:]

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        epoch = 0
        while True:
            yield from self.epoch_batches(epoch)
            epoch += 1
