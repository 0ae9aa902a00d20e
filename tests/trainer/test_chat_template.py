"""Chat records through the tokenizer's own chat template (built here, offline): the
text is what the template renders, its special tokens become their ids; a tokenizer
without a template (the bundled byte one) keeps render_chat's format."""

from __future__ import annotations

import json

from trainer.data import chat_renderer, load_documents, render_chat
from trainer.tokenizer import ByteTokenizer, load_tokenizer

CHATML = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{{ m['content'] }}<|im_end|>\n{% endfor %}"
)
CHAT = [{"role": "user", "content": "hi there"}, {"role": "assistant", "content": "hello"}]


def template_tokenizer(directory):
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["hi", "there", "hello", "user", "assistant"]
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<s>", "</s>", "<|im_start|>", "<|im_end|>"])
    directory.mkdir()
    tok.save(str(directory / "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": "</s>", "chat_template": CHATML}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return load_tokenizer(str(directory))


def test_chat_records_render_through_the_tokenizers_template(tmp_path):
    tok = template_tokenizer(tmp_path / "tok")
    data = tmp_path / "chat.jsonl"
    data.write_text(json.dumps({"messages": CHAT}) + "\n")
    (doc,) = load_documents(str(data), chat=chat_renderer(tok))
    # BOS renders empty: encode() adds it to every document.
    assert doc == "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\nhello<|im_end|>\n"
    ids = tok.encode(doc)
    start, end = tok.tokenizer.token_to_id("<|im_start|>"), tok.tokenizer.token_to_id("<|im_end|>")
    assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id and ids.count(tok.bos_id) == 1
    assert ids.count(start) == 2 and ids.count(end) == 2


def test_without_a_template_chat_keeps_the_marker_format(tmp_path):
    assert chat_renderer(ByteTokenizer()) is render_chat
    data = tmp_path / "chat.jsonl"
    data.write_text(json.dumps({"messages": CHAT}) + "\n")
    assert load_documents(str(data), chat=chat_renderer(ByteTokenizer())) == [render_chat(CHAT)]
