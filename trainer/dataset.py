"""The run's data: the dataset's token stream cut into this rank's training windows
and held-out batches, or a hub dataset streamed and packed as it is read."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from trainer import hub
from trainer.config import ConfigError, TrainConfig
from trainer.data import (
    HUB_SPLIT,
    Batch,
    PackedBatches,
    Tokens,
    assistant_segments,
    chat_renderer,
    eval_batches,
    hub_documents,
    load_documents,
    split_tokens,
    tokenize_documents,
    tokenize_with_mask,
)
from trainer.distributed import DistEnv
from trainer.stream import Batches, StreamBatches
from trainer.token_cache import cached_tokens, open_mask, token_file, tokenizer_fingerprint
from trainer.tokenizer import Tokenizer

# --- data -------------------------------------------------------------------------------


@dataclass
class Data:
    batches: Batches  # endless training micro-batches of this rank
    held_out: list[Batch]  # this rank's evaluation batches (may be empty)


def load_tokens(
    cfg: TrainConfig, tokenizer: Tokenizer, env: DistEnv
) -> tuple[Tokens, Tokens | None]:
    """The dataset's token stream and, with --train_on assistant, its loss mask. The
    bundled corpus is tokenized in memory (it is small); any other dataset once per
    host into a memory-mapped token file."""
    data = cfg.data
    masked = data.train_on == "assistant"
    chat = chat_renderer(tokenizer)

    def read_documents() -> list[Any]:
        render = assistant_segments(chat) if masked else chat
        return load_documents(data.dataset, data.dataset_config_name, render)

    if data.dataset is None:
        if masked:
            return tokenize_with_mask(read_documents(), tokenizer)
        return tokenize_documents(read_documents(), tokenizer), None
    path = token_file(
        data.dataset, data.dataset_config_name, tokenizer, data.tokenizer, train_on=data.train_on
    )
    tokens = cached_tokens(
        path,
        read_documents,
        tokenizer,
        env.local_rank,
        env.local_world_size,
        dist.barrier,
        masked,
    )
    return tokens, open_mask(path) if masked else None


def build_data(cfg: TrainConfig, tokenizer: Tokenizer, env: DistEnv) -> Data:
    """The token stream, cut into this rank's training windows and held-out batches."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if cfg.model.vocab_size < tokenizer.n_vocab:
        raise ConfigError(
            f"model vocab_size {cfg.model.vocab_size} < tokenizer vocab {tokenizer.n_vocab}; "
            f"pick a --model_type or --model_name_or_path whose vocabulary has at least "
            f"{tokenizer.n_vocab} entries, or another --tokenizer"
        )
    if hub.is_hub_id(cfg.data.dataset):
        return stream_data(cfg, tokenizer, rank, world_size)
    tokens, mask = load_tokens(cfg, tokenizer, env)
    train_tokens, val_tokens = split_tokens(tokens, cfg.data.validation_split)
    train_mask, val_mask = (
        (None, None) if mask is None else split_tokens(mask, cfg.data.validation_split)
    )
    try:
        batches = PackedBatches(
            train_tokens,
            cfg.data.seq_len,
            cfg.train_batch_size,
            rank,
            world_size,
            cfg.seed,
            train_mask,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    # A small held-out split may not fill a training-sized batch on every rank;
    # evaluate with smaller batches rather than not at all.
    val_windows = max(0, len(val_tokens) - 1) // (cfg.data.seq_len + 1)
    eval_batch = max(1, min(cfg.train_batch_size, val_windows // world_size))
    held_out = eval_batches(
        val_tokens,
        cfg.data.seq_len,
        eval_batch,
        rank,
        world_size,
        cfg.metrics.validation_batches,
        val_mask,
    )
    return Data(batches, held_out)


def stream_data(cfg: TrainConfig, tokenizer: Tokenizer, rank: int, world_size: int) -> Data:
    """A hub dataset, streamed: this rank's share packed as it is read. No held-out
    batches (a stream has no tail to hold out): validation_freq does nothing here."""
    data = cfg.data
    render = chat_renderer(tokenizer)
    if data.train_on == "assistant":
        render = assistant_segments(render)

    def documents() -> Iterator[Any]:
        return hub_documents(data.dataset or "", data.dataset_config_name, render, rank, world_size)

    # What the checkpointed position counts windows of: a checkpoint of another is refused.
    identity = {
        "dataset": data.dataset,
        "config": data.dataset_config_name,
        "split": HUB_SPLIT,
        "tokenizer": tokenizer_fingerprint(tokenizer, data.tokenizer),
    }
    batches = StreamBatches(
        documents,
        tokenizer,
        data.seq_len,
        cfg.train_batch_size,
        world_size,
        masked=data.train_on == "assistant",
        identity=identity,
    )
    return Data(batches, [])
