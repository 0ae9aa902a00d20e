"""Which windows and which target positions the batches hold, position by position: the
stream is 0..n-1, so every token names its own place in the stream and a target's value
says which mask entry must decide whether it is trained."""

from __future__ import annotations

import pytest
import torch

from trainer.data import (
    IGNORE_INDEX,
    PackedBatches,
    assistant_segments,
    encode_with_mask,
    eval_batches,
    render_chat,
)
from trainer.tokenizer import ByteTokenizer


def stream(n: int) -> torch.Tensor:
    return torch.arange(n, dtype=torch.long)


def pattern_mask(n: int) -> torch.Tensor:
    """An irregular mask (runs of 1..4), so a shift by any small amount changes it."""
    bits, value, run = [], 0, 1
    while len(bits) < n:
        bits += [value] * run
        value, run = 1 - value, run % 4 + 1
    return torch.tensor(bits[:n], dtype=torch.uint8)


def trained(batch: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor) -> None:
    """Each target is trained exactly when the mask marks that target token (the token at
    the next position of the stream, not the input's)."""
    inputs, targets = batch
    plain = inputs + 1  # the unmasked target of every position
    expected = torch.where(mask[plain] == 1, plain, torch.full_like(plain, IGNORE_INDEX))
    assert torch.equal(targets, expected)


def test_the_packed_batches_train_exactly_the_masked_target_positions():
    n = 17 * 40 + 16
    mask = pattern_mask(n)
    batches = PackedBatches(stream(n), 16, 4, 1, 2, seed=11, mask=mask)
    for _ in range(2 * batches.batches_per_epoch + 1):  # across a rollover too
        trained(next(batches), mask)


def test_eval_batches_train_exactly_the_masked_target_positions():
    n = 17 * 24
    mask = pattern_mask(n)
    for rank in range(2):
        held_out = eval_batches(stream(n), 16, 4, rank, 2, max_batches=10, mask=mask)
        assert held_out
        for batch in held_out:
            trained(batch, mask)


@pytest.mark.parametrize(("windows", "epochs"), [(32, 3), (33, 3), (39, 2)])
def test_an_epoch_reads_every_whole_global_batch_once_then_rolls_over(windows, epochs):
    # 2 ranks x 4 = 8 windows a step. 32 windows: exactly 4 steps, none dropped; 33 and 39:
    # 4 steps and the remainder (fewer than 8) skipped.
    n = windows * 17 + 16  # seq_len more than whole windows: any epoch offset fits
    ranks = [PackedBatches(stream(n), 16, 4, r, 2, seed=2) for r in range(2)]
    assert ranks[0].n_windows == windows and ranks[0].batches_per_epoch == windows // 8
    for epoch in range(epochs):
        seen: list[int] = []
        for _ in range(windows // 8):
            for b in ranks:
                seen += next(b)[0][:, 0].tolist()
            assert {b.epoch for b in ranks} == {epoch}
        offsets = {s % 17 for s in seen}
        assert len(offsets) == 1  # one offset per epoch
        assert len(set(seen)) == len(seen) == windows // 8 * 8  # no window twice
    assert ranks[0].state_dict() == ranks[1].state_dict()


# A chat as --train_on assistant segments -> the mask of each of its tokens (byte-level:
# one token a character): BOS never trained, each turn as its role says, EOS as the last
# turn (an assistant reply learns to end; after a user turn there is nothing to learn).
MASKS = {
    "ends with the assistant": ([("hi", False), ("yo", True)], "0" + "00" + "11" + "1"),
    "ends with the user": ([("yo", True), ("hi", False)], "0" + "11" + "00" + "0"),
    "one user turn": ([("hey", False)], "0" + "000" + "0"),
    "plain text": ("abc", "1" + "111" + "1"),  # not a chat: trained whole, BOS too
}


def test_the_mask_of_each_token_of_a_chat():
    docs = [doc for doc, _ in MASKS.values()]
    pairs = encode_with_mask(docs, ByteTokenizer())
    for (name, (_, expected)), (ids, mask) in zip(MASKS.items(), pairs, strict=True):
        assert ids[0] == ByteTokenizer.bos_id and ids[-1] == ByteTokenizer.eos_id, name
        assert "".join(map(str, mask)) == expected, name


def test_only_the_assistant_turns_are_trained_whatever_the_other_roles():
    call = {"type": "function", "function": {"name": "f", "arguments": {}}}
    chat = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "42"},
        {"role": "assistant", "content": "42"},
        {"role": "developer", "content": "x"},
    ]
    segments = assistant_segments(render_chat)(chat)
    assert [trained for _, trained in segments] == [False, False, True, False, True, False]


@pytest.mark.parametrize(
    ("epoch", "position", "valid"),
    [(0, 0, True), (3, 32, True), (0, 33, False), (-1, 0, False), (0, -1, False)],
)
def test_a_resumed_position_is_within_the_epochs_windows(epoch, position, valid):
    batches = PackedBatches(stream(32 * 17 + 16), 16, 4, 0, 2, seed=2)  # 32 windows
    state = {**batches.state_dict(), "epoch": epoch, "position": position}
    if valid:
        batches.load_state_dict(state)
        assert (batches.epoch, batches.position) == (epoch, position)
    else:
        with pytest.raises(ValueError, match="invalid data state"):
            batches.load_state_dict(state)
