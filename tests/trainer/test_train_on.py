"""--train_on assistant: chat records keep their turns through tokenization, the loss
mask follows them into the token cache and the packed batches (targets IGNORE_INDEX
outside assistant turns), masked positions add nothing to the loss, and the default
`all` gives the batches and loss of before."""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F

from tests.trainer.test_chat_template import CHAT, template_tokenizer
from trainer.data import (
    IGNORE_INDEX,
    PackedBatches,
    assistant_segments,
    chat_renderer,
    load_documents,
    tokenize_documents,
    tokenize_with_mask,
)
from trainer.loss import token_loss
from trainer.token_cache import cached_tokens, open_mask, token_file
from trainer.tokenizer import HFTokenizer

TWO_TURNS = [*CHAT, {"role": "user", "content": "there"}, {"role": "assistant", "content": "hi"}]


def chat_file(tmp_path, chats):
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps({"messages": c}) + "\n" for c in chats))
    return path


def test_the_mask_covers_exactly_the_assistant_turns(tmp_path):
    tok = template_tokenizer(tmp_path / "tok")
    data = chat_file(tmp_path, [TWO_TURNS])
    (doc,) = load_documents(str(data), chat=assistant_segments(chat_renderer(tok)))
    # The segments join to the text the template renders for the whole chat.
    (whole,) = load_documents(str(data), chat=chat_renderer(tok))
    assert "".join(text for text, _ in doc) == whole
    assert [trained for _, trained in doc] == [False, True, False, True]
    ids, mask = tokenize_with_mask([doc], tok)
    assert ids.tolist() == tok.encode(whole)  # word-level: turn-wise encoding is the same
    assert isinstance(tok, HFTokenizer)
    vocab = tok.tokenizer.id_to_token
    kept = [vocab(i) for i, m in zip(ids.tolist(), mask.tolist(), strict=True) if m]
    # Each assistant turn: its header, reply and end marker; then EOS (the last turn's).
    assert kept == ["<|im_start|>", "assistant", "hello", "<|im_end|>",
                    "<|im_start|>", "assistant", "hi", "<|im_end|>", "</s>"]  # fmt: skip


def test_masked_targets_are_ignored_in_the_packed_batches(tmp_path):
    tok = template_tokenizer(tmp_path / "tok")
    docs = load_documents(
        str(chat_file(tmp_path, [TWO_TURNS] * 20)), chat=assistant_segments(chat_renderer(tok))
    )
    ids, mask = tokenize_with_mask(docs, tok)
    masked = PackedBatches(ids, 8, 2, 0, 1, seed=3, mask=mask)
    plain = PackedBatches(ids, 8, 2, 0, 1, seed=3)
    for _ in range(5):
        (x, y), (x0, y0) = next(masked), next(plain)
        assert torch.equal(x, x0)
        keep = y != IGNORE_INDEX
        assert torch.equal(y[keep], y0[keep]) and keep.any() and not keep.all()


def test_masked_positions_contribute_no_loss_and_all_is_unchanged():
    torch.manual_seed(0)
    logits = torch.randn(2, 6, 11, requires_grad=True)
    targets = torch.randint(0, 11, (2, 6))
    # `all`: the loss of before, bit for bit.
    assert torch.equal(
        token_loss(logits, targets, masked=False),
        F.cross_entropy(logits.float().flatten(0, 1), targets.flatten()),
    )
    masked = targets.clone()
    masked[:, :3] = IGNORE_INDEX
    loss = token_loss(logits, masked, masked=True)
    assert torch.allclose(
        loss, F.cross_entropy(logits[:, 3:].flatten(0, 1), targets[:, 3:].flatten())
    )
    loss.backward()
    assert logits.grad is not None
    assert torch.count_nonzero(logits.grad[:, :3]) == 0 and torch.count_nonzero(logits.grad[:, 3:])
    # Changing the logits at masked positions changes nothing.
    other = logits.detach().clone()
    other[:, :3] += 100.0
    assert torch.equal(token_loss(other, masked, masked=True), loss.detach())
    # A micro-batch with nothing to train on: 0, not NaN.
    nothing = torch.full_like(targets, IGNORE_INDEX)
    assert token_loss(logits, nothing, masked=True).item() == 0.0


def test_the_token_cache_keeps_the_mask_beside_the_tokens(tmp_path):
    tok = template_tokenizer(tmp_path / "tok")
    data = chat_file(tmp_path, [TWO_TURNS, CHAT] * 5)

    def read():
        return load_documents(str(data), chat=assistant_segments(chat_renderer(tok)))

    path = token_file(str(data), None, tok, None, root=tmp_path / "cache", train_on="assistant")
    assert path != token_file(str(data), None, tok, None, root=tmp_path / "cache")
    tokens = cached_tokens(path, read, tok, 0, 1, lambda: None, masked=True)
    ids, mask = tokenize_with_mask(read(), tok)
    assert tokens.tolist() == ids.tolist() and open_mask(path).tolist() == mask.tolist()
    # The unmasked stream of the same chats is today's: one document string each.
    plain = load_documents(str(data), chat=chat_renderer(tok))
    assert tokenize_documents(plain, tok).tolist() == ids.tolist()


def test_a_run_trains_on_the_assistant_turns(tmp_path, monkeypatch, no_dist_env, capsys):
    from trainer import train as train_mod

    monkeypatch.setenv("FSDP_EKS_CACHE_DIR", str(tmp_path / "cache"))
    tok_dir = tmp_path / "tok"
    template_tokenizer(tok_dir)
    data = chat_file(tmp_path, [TWO_TURNS] * 200)
    args = ["--dataset", str(data), "--tokenizer", str(tok_dir), "--seq_len", "16",
            "--train_batch_size", "4", "--max_steps", "3", "--log_freq", "1",
            "--train_on", "assistant"]  # fmt: skip
    assert train_mod.main(args) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    losses = [e["loss"] for e in events if e["event"] == "step"]
    assert len(losses) == 3 and all(loss == loss and loss > 0 for loss in losses)
    assert list((tmp_path / "cache" / "tokens").glob("*.mask"))
