"""Documents in, packed token batches out.

    load_documents(dataset)      bundled corpus, .txt/.jsonl file or dir, s3://
    hub_documents(name, ...)     a hub dataset's documents, streamed (trainer/stream.py
                                 packs them into batches)
    tokenize_documents(docs, t)  one stream: BOS + doc + EOS, concatenated
    split_tokens(tokens, share)  (train, validation): the validation share is the tail
    PackedBatches(...)           endless shuffled training micro-batches for one rank,
                                 resumable from state_dict(), even on another world size
    eval_batches(...)            a fixed list of held-out batches for one rank

The stream is cut into windows of seq_len + 1 tokens (inputs are window[:-1], targets
window[1:]); documents run across window edges, so no padding is ever needed.
"""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainer import storage
from trainer.config import ConfigError
from trainer.hub import TOKEN_HINT
from trainer.safe_files import open_regular, read_regular
from trainer.tokenizer import ByteTokenizer, HFTokenizer, Tokenizer

__all__ = [
    "ByteTokenizer",
    "HFTokenizer",
    "PackedBatches",
    "bundled_documents",
    "eval_batches",
    "hub_documents",
    "load_documents",
    "assistant_segments",
    "render_chat",
    "split_tokens",
    "tokenize_documents",
]

DATA_SUFFIXES = (".txt", ".jsonl")
HUB_INSTALL_HINT = "pip install 'fsdp-eks[trainer]'"

Batch = tuple[torch.Tensor, torch.Tensor]


# --- documents ------------------------------------------------------------------------


def bundled_documents() -> list[str]:
    """The small English corpus shipped in trainer/corpus (one document per file)."""
    corpus = resources.files("trainer").joinpath("corpus")
    files = sorted((f for f in corpus.iterdir() if f.name.endswith(".txt")), key=lambda f: f.name)
    return [f.read_text(encoding="utf-8") for f in files]


def render_chat(messages: Any, tools: Any = None) -> str:
    """A chat as plain text, one block per message:

        <|user|>
        What is FSDP?
        <|assistant|>
        Fully sharded data parallelism.

    The markers are ordinary text (no tokenizer needs special tokens for them), so the
    same template works with the byte tokenizer and any tokenizer.json. Tool calling
    (OpenAI's format): the record's `tools` open the chat as a `<|tools|>` block, an
    assistant message may have `content: null` and `tool_calls` (each rendered as a
    `<tool_call>` JSON line), and `role: tool` messages carry the results. Raises
    ValueError on any other shape.
    """
    check_chat(messages, tools)
    blocks = [f"<|tools|>\n{json.dumps(tools, ensure_ascii=False)}\n"] if tools else []
    for message in messages:
        text = message.get("content") or ""
        for call in message.get("tool_calls") or []:
            call_json = json.dumps(call.get("function", call), ensure_ascii=False)
            text += ("\n" if text else "") + f"<tool_call>{call_json}</tool_call>"
        blocks.append(f"<|{message['role']}|>\n{text}\n")
    return "".join(blocks)


def check_chat(messages: Any, tools: Any = None) -> None:
    """A list of {"role": str, "content": str}; `content` may be null (or absent) on a
    message with `tool_calls` (a list of objects); `tools` a list of objects."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("'messages' must be a non-empty list of {role, content} objects")
    if tools is not None and not (
        isinstance(tools, list) and all(isinstance(t, dict) for t in tools)
    ):
        raise ValueError("'tools' must be a list of objects")
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ValueError(f"messages[{i}] is not an object")
        role, content = message.get("role"), message.get("content")
        calls = message.get("tool_calls")
        if not isinstance(role, str) or not role:
            raise ValueError(f"messages[{i}].role must be a non-empty string")
        if calls is not None and not (
            isinstance(calls, list) and calls and all(isinstance(c, dict) for c in calls)
        ):
            raise ValueError(f"messages[{i}].tool_calls must be a non-empty list of objects")
        if not isinstance(content, str) and not (content is None and calls):
            raise ValueError(f"messages[{i}].content must be a string (null only with tool_calls)")


# (messages, tools=None) -> the chat's text (or, for --train_on assistant, Segments).
ChatRenderer = Callable[..., Any]

# --train_on assistant: a chat document is a list of (text, trained_on) segments, so
# the loss mask can follow the turns through tokenization.
Segments = list[tuple[str, bool]]
Document = str | Segments
IGNORE_INDEX = -100  # F.cross_entropy's default ignore_index


def assistant_segments(render: Callable[..., str]) -> Callable[..., Segments]:
    """A chat renderer that keeps the turns apart: messages[i]'s text is what rendering
    messages[:i+1] adds to messages[:i], trained on when its role is "assistant" (its
    tool calls included; tool results, role "tool", are not)."""

    def segments(messages: Any, tools: Any = None) -> Segments:
        full = render(messages, tools)
        out: Segments = []
        done = ""
        for i, message in enumerate(messages):
            text = full if i == len(messages) - 1 else render(messages[: i + 1], tools)
            if not text.startswith(done):
                raise ValueError(
                    "the chat template does not render a conversation's prefix as the "
                    "start of the whole, so turns cannot be masked; use --train_on all"
                )
            out.append((text[len(done) :], message["role"] == "assistant"))
            done = text
        return out

    return segments


def chat_renderer(tokenizer: Tokenizer) -> ChatRenderer:
    """How chat records become text for this tokenizer: its own chat template (the
    format the model sees at inference) when it has one, else render_chat."""
    template = getattr(tokenizer, "chat_template", None)
    if template is None:
        return render_chat

    def render(messages: Any, tools: Any = None) -> str:
        check_chat(messages, tools)  # the same checks of the records' shape
        return template(messages, tools)

    return render


def _record_text(record: Any, chat: ChatRenderer = render_chat) -> str:
    """The document in one JSONL record / hub row: its `text`, else its `messages`."""
    if not isinstance(record, dict):
        raise ValueError("expected a JSON object")
    if "text" in record:
        if not isinstance(record["text"], str):
            raise ValueError("'text' must be a string")
        return record["text"]
    if "messages" in record:
        return chat(record["messages"], record.get("tools"))
    raise ValueError("expected a 'text' string or a chat 'messages' list")


def _read_jsonl(path: Path, chat: ChatRenderer) -> list[str]:
    docs = []
    # A regular file only (a FIFO or device is refused at open), read line by line.
    with io.TextIOWrapper(open_regular(path, "dataset file"), encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue  # blank lines (e.g. a trailing newline pair) are not records
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ConfigError(
                    f"{path}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})"
                ) from exc
            try:
                docs.append(_record_text(record, chat))
            except ValueError as exc:
                raise ConfigError(f"{path}:{lineno}: bad record: {exc}") from exc
    return docs


def _read_file(path: Path, chat: ChatRenderer) -> list[str]:
    try:
        if path.suffix == ".jsonl":
            return _read_jsonl(path, chat)
        if path.suffix == ".txt":  # one document: read up to its size, a regular file only
            return [read_regular(path, "dataset file").decode("utf-8")]
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text: {exc}") from exc
    raise ConfigError(
        f"{path}: unsupported file type {path.suffix!r}; use .txt (one document) or "
        '.jsonl (one {"text": ...} or {"messages": [...]} object per line)'
    )


def _read_local(path: Path, chat: ChatRenderer) -> list[str]:
    if not path.is_dir():
        return _read_file(path, chat)
    # Recursive and sorted by relative path: the same documents in the same order on
    # every rank and every run. Other files (.json metadata, READMEs) and hidden ones
    # (editor/OS litter such as ._a.txt) are skipped.
    files = sorted(
        (
            f
            for f in path.rglob("*")
            if f.is_file()
            and f.suffix in DATA_SUFFIXES
            and not any(part.startswith(".") for part in f.relative_to(path).parts)
        ),
        key=lambda f: f.relative_to(path).as_posix(),
    )
    if not files:
        raise ConfigError(f"dataset directory {path} has no .txt or .jsonl files")
    return [doc for f in files for doc in _read_file(f, chat)]


HUB_SPLIT = "train"  # the split a hub dataset is trained on


def hub_documents(
    name: str, config_name: str | None, chat: ChatRenderer, rank: int, world_size: int
) -> Iterator[Document]:
    """One pass over this rank's share of a hub dataset's "train" split, STREAMED (read
    as far as it is iterated, never downloaded whole): its `text` or `messages` column,
    empty documents dropped. Ranks read disjoint shards (files) where the file count
    divides among them, else every world_size-th row each."""
    try:
        import datasets  # optional and heavy (pyarrow): only hub datasets need it
        from datasets.distributed import split_dataset_by_node
    except ImportError as exc:
        raise ConfigError(
            f"dataset {name!r} is not a local path or s3:// URI, so it is read from the "
            f"Hugging Face hub, which needs the datasets package: {HUB_INSTALL_HINT}"
        ) from exc
    try:
        stream = datasets.load_dataset(name, config_name, split=HUB_SPLIT, streaming=True)
    except Exception as exc:  # unknown name, missing config, gated, no network: all land here
        raise ConfigError(
            f"could not open hub dataset {name!r} (config {config_name!r}): {exc}; "
            f"for a gated or private dataset {TOKEN_HINT}; a host without internet needs "
            "a local or s3:// .jsonl dataset"
        ) from exc
    stream = split_dataset_by_node(stream, rank=rank, world_size=world_size)
    columns = set(stream.column_names or ())
    if columns and not columns & {"text", "messages"}:
        raise ConfigError(
            f"hub dataset {name!r} has no 'text' or 'messages' column "
            f"(columns: {', '.join(sorted(columns))})"
        )
    for i, row in enumerate(stream):
        try:
            doc = _record_text(row, chat)
        except ValueError as exc:
            raise ConfigError(
                f"hub dataset {name!r} row {i} of rank {rank}'s share: {exc}"
            ) from exc
        if document_text(doc).strip():
            yield doc


def document_text(doc: Document) -> str:
    return doc if isinstance(doc, str) else "".join(text for text, _ in doc)


def load_documents(
    dataset: str | None, config_name: str | None = None, chat: ChatRenderer = render_chat
) -> list[Any]:
    """The documents of `--dataset`, in a fixed order.

    None              the bundled English corpus
    file.txt          one document
    file.jsonl        one document per line: {"text": "..."} or
                      {"messages": [{"role": "user", "content": "..."}, ...]} (`chat`:
                      render_chat, or chat_renderer(tokenizer); with
                      assistant_segments(...) a chat becomes Segments)
    directory         every .txt/.jsonl below it, sorted by relative path
    s3://bucket/key   an object or a prefix of them, downloaded (storage.fetch)
    org/name          refused: a hub dataset is streamed (hub_documents, StreamBatches)

    Empty or whitespace-only documents are dropped: they would only add BOS/EOS pairs.
    Bad input raises ConfigError naming the file and line.
    """
    if dataset is None:
        docs = bundled_documents()
    elif storage.is_s3(dataset):
        try:
            local = storage.fetch(dataset)
        except FileNotFoundError as exc:
            raise ConfigError(f"dataset {dataset!r}: no objects there") from exc
        docs = _read_local(local, chat)
    elif Path(dataset).expanduser().exists():
        docs = _read_local(Path(dataset).expanduser(), chat)
    elif Path(dataset).suffix in (*DATA_SUFFIXES, ".json") or dataset.startswith(("/", ".", "~")):
        raise ConfigError(f"dataset {dataset!r} does not exist")
    else:
        raise ConfigError(f"dataset {dataset!r} is a hub dataset: it is streamed, not loaded whole")
    docs = [d for d in docs if document_text(d).strip()]
    if not docs:
        raise ConfigError(f"dataset {dataset!r} has no non-empty documents")
    return docs


def tokenize_documents(docs: list[str], tokenizer: Tokenizer) -> torch.Tensor:
    """One int64 stream: BOS + doc + EOS for each document, in order."""
    ids = tokenizer.encode_batch(docs)
    return torch.tensor(list(itertools.chain.from_iterable(ids)), dtype=torch.long)


def encode_with_mask(
    docs: list[Document], tokenizer: Tokenizer
) -> list[tuple[list[int], list[int]]]:
    """(ids, mask) per document: BOS + doc + EOS like tokenize_documents, mask 1 where the
    token is trained on as a target. A plain text document is trained on whole; a chat
    (Segments) on its assistant turns, each turn encoded alone so the mask is exact. The
    EOS follows the last turn's mask (an assistant reply learns to end)."""
    out = []
    for doc in docs:
        if isinstance(doc, str):
            ids = tokenizer.encode(doc)
            out.append((ids, [1] * len(ids)))
            continue
        ids = tokenizer.encode("", eos=False)  # BOS: never a target of the previous doc
        mask = [0] * len(ids)
        for text, trained in doc:
            part = tokenizer.encode(text, bos=False, eos=False)
            ids += part
            mask += [int(trained)] * len(part)
        tail = tokenizer.encode("", bos=False)
        ids += tail
        mask += [int(doc[-1][1]) if doc else 1] * len(tail)
        out.append((ids, mask))
    return out


def tokenize_with_mask(
    docs: list[Document], tokenizer: Tokenizer
) -> tuple[torch.Tensor, torch.Tensor]:
    """The stream of tokenize_documents and its uint8 loss mask (--train_on assistant)."""
    pairs = encode_with_mask(docs, tokenizer)
    ids = torch.tensor([i for p, _ in pairs for i in p], dtype=torch.long)
    mask = torch.tensor([m for _, ms in pairs for m in ms], dtype=torch.uint8)
    return ids, mask


def split_tokens(tokens: Tokens, validation_split: float) -> tuple[Tokens, Tokens]:
    """(train, validation): the last `validation_split` share of the stream is held out.

    A fixed cut, not a random sample: every rank and every resumed run agree on it
    without communicating, and no training window can overlap a validation token.
    """
    if not 0 <= validation_split < 1:
        raise ValueError(f"validation_split must be in [0, 1), got {validation_split}")
    n_val = int(len(tokens) * validation_split)
    cut = len(tokens) - n_val
    return tokens[:cut], tokens[cut:]


# --- batches --------------------------------------------------------------------------


# A token stream: an int64 tensor, or a (memory-mapped) numpy array of uint16/uint32
# read window by window (token_cache.py).
Tokens = torch.Tensor | np.ndarray


def as_stream(tokens: Tokens | list[int]) -> Tokens:
    """A numpy stream stays as it is (not read whole); anything else -> int64 tensor."""
    if isinstance(tokens, np.ndarray):
        return tokens
    return torch.as_tensor(tokens, dtype=torch.long)


def _rows(stream: Tokens, index: torch.Tensor) -> torch.Tensor:
    if isinstance(stream, np.ndarray):
        return torch.from_numpy(stream[index.numpy()].astype(np.int64))
    return stream[index].long()


def _gather(tokens: Tokens, starts: torch.Tensor, window: int, mask: Tokens | None = None) -> Batch:
    """(inputs, targets); with a loss mask, targets are IGNORE_INDEX where it is 0."""
    index = starts[:, None] + torch.arange(window)
    rows = _rows(tokens, index)
    targets = rows[:, 1:].contiguous()
    if mask is not None:
        targets[_rows(mask, index)[:, 1:] == 0] = IGNORE_INDEX
    return rows[:, :-1].contiguous(), targets


class PackedBatches:
    """Endless (inputs, targets) micro-batches of shape (batch_size, seq_len) for one rank.

    Each epoch cuts the stream at a random offset into n_windows windows and shuffles
    them, with a generator seeded by (seed, epoch) only, so every rank (and every world
    size) sees the same permutation. `position` counts windows of that permutation
    consumed by the whole job in this epoch: each next() consumes one global
    micro-batch of batch_size * world_size windows, of which rank r takes the slice
    [r * batch_size, (r + 1) * batch_size). Ranks therefore never share a window, and a
    run of 2 ranks x 4 consumes exactly the windows of a run of 1 rank x 8 at every
    step: a checkpoint resumes on another world size with the same global batches.

    When fewer than one global micro-batch of windows is left, the next epoch starts
    (the remainder is skipped; it is a different set each epoch). All ranks roll over
    together, so they stay in lockstep.
    """

    def __init__(
        self,
        tokens: Tokens,
        seq_len: int,
        batch_size: int,
        rank: int,
        world_size: int,
        seed: int,
        mask: Tokens | None = None,
    ) -> None:
        if seq_len < 1 or batch_size < 1:
            raise ValueError("seq_len and batch_size must be >= 1")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
        self.tokens = as_stream(tokens)
        # The loss mask (--train_on assistant), token for token; None = train on all.
        self.mask = mask
        self.masked = mask is not None
        self.seq_len = seq_len
        self.window = seq_len + 1
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self.global_batch = batch_size * world_size
        # Windows that fit whatever the epoch's offset (offset < window). Depends on the
        # data and seq_len only, not on the world size: part of the resumable state.
        self.n_windows = max(0, (len(self.tokens) - seq_len) // self.window)
        self.batches_per_epoch = self.n_windows // self.global_batch
        if self.batches_per_epoch == 0:
            raise ValueError(
                f"dataset too small: {len(self.tokens)} training tokens give "
                f"{self.n_windows} windows of seq_len + 1 = {self.window} tokens, fewer "
                f"than world_size x train_batch_size = {self.global_batch}; use more data, "
                "a smaller seq_len or a smaller train_batch_size"
            )
        self.epoch = 0
        self.position = 0
        self._plan: tuple[int, int, torch.Tensor] | None = None  # (epoch, offset, order)

    def _epoch_plan(self) -> tuple[int, torch.Tensor]:
        """This epoch's (offset, window order); cached, recomputed when epoch changes."""
        if self._plan is None or self._plan[0] != self.epoch:
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            offset = int(torch.randint(0, self.window, (1,), generator=gen))
            order = torch.randperm(self.n_windows, generator=gen)
            self._plan = (self.epoch, offset, order)
        return self._plan[1], self._plan[2]

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        if self.position + self.global_batch > self.n_windows:
            self.epoch += 1
            self.position = 0
        offset, order = self._epoch_plan()
        first = self.position + self.rank * self.batch_size
        idx = order[first : first + self.batch_size]
        self.position += self.global_batch
        return _gather(self.tokens, offset + idx * self.window, self.window, self.mask)

    def state_dict(self) -> dict[str, int]:
        # Plain ints: stored as-is in a DCP checkpoint, identical on every rank.
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "n_windows": self.n_windows,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue exactly where `state` was taken (any rank count or batch split)."""
        seed, n_windows = int(state["seed"]), int(state["n_windows"])
        if seed != self.seed or n_windows != self.n_windows:
            raise ValueError(
                f"cannot resume the data order: the checkpoint was taken with seed {seed} "
                f"and {n_windows} windows, this run has seed {self.seed} and "
                f"{self.n_windows} windows (the dataset, tokenizer, seq_len or seed changed)"
            )
        epoch, position = int(state["epoch"]), int(state["position"])
        if epoch < 0 or not 0 <= position <= self.n_windows:
            raise ValueError(f"invalid data state: epoch {epoch}, position {position}")
        self.epoch, self.position = epoch, position


def eval_batches(
    tokens: Tokens,
    seq_len: int,
    batch_size: int,
    rank: int,
    world_size: int,
    max_batches: int,
    mask: Tokens | None = None,
) -> list[Batch]:
    """Up to `max_batches` fixed held-out batches for one rank; [] when too little data.

    Windows are cut from offset 0 without shuffling; rank r takes windows r,
    r + world_size, ... The batch count comes from the global window count, so every
    rank gets the same number (evaluation ends in a collective). Global batch b covers
    windows [b * batch_size * world_size, (b + 1) * batch_size * world_size) whatever
    the split into ranks, so 2 x 4 and 1 x 8 evaluate the same windows.
    """
    window = seq_len + 1
    tokens = as_stream(tokens)
    per_rank = (len(tokens) // window) // world_size
    n_batches = max(0, min(max_batches, per_rank // batch_size))
    batches = []
    for b in range(n_batches):
        idx = (torch.arange(batch_size) + b * batch_size) * world_size + rank
        batches.append(_gather(tokens, idx * window, window, mask))
    return batches
