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
The state also names the stream it counts (dataset, config, split, tokenizer, seq_len,
format: `identity`): a checkpoint of another stream is refused with what differs, before
anything is read, as a token file's position is (data.PackedBatches). Not a fresh start:
the model, optimizer and step of the old run would go on with another dataset's data, and
its checkpoints would be overwritten; a new --checkpoint_dir is the deliberate way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import torch

from trainer.config import ConfigError
from trainer.data import IGNORE_INDEX, Batch, Document, PackedBatches, encode_with_mask
from trainer.tokenizer import Tokenizer

Window = tuple[list[int], list[int] | None]
STATE_IDENTITY = "stream_identity"


def pack_windows(encoded: Iterable[Window], window: int) -> Iterator[Window]:
    """Consecutive `window`-token slices of the documents' tokens run together (a mask
    rides along where the documents have one); the tail short of a window is dropped.
    Linear in the tokens: windows are cut at a moving offset and only the short
    remainder is moved down once per document (cutting each window off the front of
    the buffer moved a whole long document once per window: quadratic)."""
    ids: list[int] = []
    mask: list[int] = []
    masked = False
    for doc_ids, doc_mask in encoded:
        masked = masked or doc_mask is not None
        ids += doc_ids
        mask += doc_mask or []
        start = 0
        while len(ids) - start >= window:
            end = start + window
            yield ids[start:end], (mask[start:end] if masked else None)
            start = end
        del ids[:start]
        del mask[:start]


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
        identity: Mapping[str, object] | None = None,
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
        # What the position counts windows of: a checkpoint of another stream is refused.
        self.identity = json.dumps(
            {**(identity or {}), "seq_len": seq_len, "masked": masked}, sort_keys=True
        )
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
            made = 0
            for window in pack_windows(map(self._encode, self.documents()), self.window):
                made += 1
                yield window
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

    def state_dict(self) -> dict[str, int | str]:
        # Plain values, identical on every rank (stored as-is in a DCP checkpoint).
        return {
            "stream_windows": self.windows_done,
            "seq_len": self.seq_len,
            STATE_IDENTITY: self.identity,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Skip what the job had consumed: this rank's share of those windows (on another
        world size, the same count of windows, split among the ranks there are now)."""
        if "stream_windows" not in state:
            raise ValueError("the checkpoint's data position is not that of a stream")
        if differs := identity_changes(str(state.get(STATE_IDENTITY)), self.identity):
            raise ValueError(
                f"the checkpoint's data position is that of another stream ({differs})"
            )
        done = int(state["stream_windows"])
        for _ in range(done // self.world_size):
            next(self._windows)
        self.windows_done = done


def identity_changes(saved: str, ours: str) -> str:
    """'key saved -> ours' for each part of two stream identities that differs ('' when
    none); a saved one that is not an identity differs in whole."""
    try:
        before = json.loads(saved)
    except ValueError:
        before = None
    if not isinstance(before, dict):
        return f"no stream identity recorded -> {ours}"
    now = json.loads(ours)
    changed = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
    return ", ".join(f"{k} {before.get(k)!r} -> {now.get(k)!r}" for k in changed)


# What the training loop and checkpoints take: a token file's batches or a stream's.
Batches = PackedBatches | StreamBatches
