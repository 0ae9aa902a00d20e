"""Training batches from a document stream (a hub dataset, trainer/data.hub_documents).

A stream cannot be shuffled, split at its tail or counted up front the way a token file
is (data.PackedBatches), so StreamBatches packs it as it comes: each document becomes
BOS + doc + EOS (with its loss mask under --train_on assistant), the tokens run on
across document edges, and every seq_len + 1 of them make one window. A rank's share
ends -> it starts over (the next epoch), so no rank runs out while the others wait in
a collective.

Resume: the state is the number of windows the whole job has consumed, the same on every
rank; a resumed rank reads its share again from the start and skips its part of them.
That re-reads (tokenizes) what was trained on, which a stream has to: it has no offset.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from trainer.config import ConfigError
from trainer.data import IGNORE_INDEX, Batch, Document, PackedBatches, encode_with_mask
from trainer.tokenizer import Tokenizer

Window = tuple[list[int], list[int] | None]


class StreamBatches:
    """Endless (inputs, targets) micro-batches of shape (batch_size, seq_len) for one
    rank, packed from `documents()` (one pass over this rank's share per call)."""

    def __init__(
        self,
        documents: Callable[[], Iterator[Document]],
        tokenizer: Tokenizer,
        seq_len: int,
        batch_size: int,
        world_size: int,
        masked: bool = False,
    ) -> None:
        if seq_len < 1 or batch_size < 1:
            raise ValueError("seq_len and batch_size must be >= 1")
        self.documents = documents
        self.tokenizer = tokenizer
        self.seq_len = seq_len
        self.window = seq_len + 1
        self.batch_size = batch_size
        self.world_size = world_size
        self.masked = masked
        self.epoch = 0
        self.windows_done = 0  # by the whole job: batch_size x world_size per next()
        self._windows = self._generate()

    def _encode(self, doc: Document) -> Window:
        if self.masked:
            ((ids, mask),) = encode_with_mask([doc], self.tokenizer)
            return ids, mask
        if not isinstance(doc, str):  # Segments only come with a mask
            doc = "".join(text for text, _ in doc)
        return self.tokenizer.encode(doc), None

    def _generate(self) -> Iterator[Window]:
        while True:
            ids: list[int] = []
            mask: list[int] = []
            made = 0
            for doc in self.documents():
                doc_ids, doc_mask = self._encode(doc)
                ids += doc_ids
                mask += doc_mask or []
                while len(ids) >= self.window:
                    yield ids[: self.window], (mask[: self.window] if self.masked else None)
                    del ids[: self.window]
                    del mask[: self.window]
                    made += 1
            if made == 0:
                raise ConfigError(
                    f"dataset too small: this rank's share of the stream has fewer than "
                    f"seq_len + 1 = {self.window} tokens; use more data or a smaller seq_len"
                )
            self.epoch += 1  # the share ran out: start it over

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        windows = [next(self._windows) for _ in range(self.batch_size)]
        self.windows_done += self.batch_size * self.world_size
        rows = torch.tensor([w for w, _ in windows], dtype=torch.long)
        targets = rows[:, 1:].contiguous()
        if self.masked:
            keep = torch.tensor([m for _, m in windows], dtype=torch.uint8)[:, 1:]
            targets[keep == 0] = IGNORE_INDEX
        return rows[:, :-1].contiguous(), targets

    def state_dict(self) -> dict[str, int]:
        # Plain ints, identical on every rank (stored as-is in a DCP checkpoint).
        return {"stream_windows": self.windows_done, "seq_len": self.seq_len}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Skip what the job had consumed: this rank's share of those windows (on another
        world size, the same count of windows, split among the ranks there are now)."""
        if "stream_windows" not in state or int(state["seq_len"]) != self.seq_len:
            raise ValueError(
                "the checkpoint's data position is not that of this stream (another dataset "
                "or seq_len)"
            )
        done = int(state["stream_windows"])
        for _ in range(done // self.world_size):
            next(self._windows)
        self.windows_done = done


# What the training loop and checkpoints take: a token file's batches or a stream's.
Batches = PackedBatches | StreamBatches
