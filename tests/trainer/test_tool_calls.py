"""Tool-calling chat records (OpenAI's format: the record's `tools`, an assistant turn
with `content: null` and `tool_calls`, `role: tool` results) render through the
tokenizer's own chat template with the tools, and --train_on assistant trains on the
assistant turns (their calls included) and never on the tool results."""

from __future__ import annotations

import json

import pytest

from trainer.data import (
    assistant_segments,
    chat_renderer,
    load_documents,
    render_chat,
    tokenize_with_mask,
)
from trainer.tokenizer import HFTokenizer, load_tokenizer

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
CALL = {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
CHAT = [
    {"role": "user", "content": "weather Paris"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "content": "sunny"},
    {"role": "assistant", "content": "sunny"},
]
# Qwen's shape, reduced: the tools in a system block, each call as <tool_call>name.
TEMPLATE = (
    "{% if tools %}<|im_start|>system\n{% for t in tools %}{{ t['function']['name'] }}"
    "{% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['content'] %}{{ m['content'] }}{% endif %}"
    "{% for c in m.get('tool_calls') or [] %}<tool_call>{{ c['function']['name'] }}"
    "</tool_call>{% endfor %}<|im_end|>\n{% endfor %}"
)


def tool_tokenizer(directory) -> HFTokenizer:
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["weather", "Paris", "sunny", "get_weather", "user", "assistant", "tool", "system"]
    vocab = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(words)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(
        ["<s>", "</s>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
    )
    directory.mkdir()
    tok.save(str(directory / "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": "</s>", "chat_template": TEMPLATE}
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    loaded = load_tokenizer(str(directory))
    assert isinstance(loaded, HFTokenizer)
    return loaded


def chat_file(tmp_path):
    path = tmp_path / "tools.jsonl"
    path.write_text(json.dumps({"messages": CHAT, "tools": TOOLS}) + "\n")
    return path


def test_tool_calls_render_through_the_template_with_the_tools(tmp_path):
    tok = tool_tokenizer(tmp_path / "tok")
    (doc,) = load_documents(str(chat_file(tmp_path)), chat=chat_renderer(tok))
    assert doc == (
        "<|im_start|>system\nget_weather<|im_end|>\n"
        "<|im_start|>user\nweather Paris<|im_end|>\n"
        "<|im_start|>assistant\n<tool_call>get_weather</tool_call><|im_end|>\n"
        "<|im_start|>tool\nsunny<|im_end|>\n"
        "<|im_start|>assistant\nsunny<|im_end|>\n"
    )


def test_train_on_assistant_trains_the_calls_not_the_tool_results(tmp_path):
    tok = tool_tokenizer(tmp_path / "tok")
    data = str(chat_file(tmp_path))
    (doc,) = load_documents(data, chat=assistant_segments(chat_renderer(tok)))
    assert [trained for _, trained in doc] == [False, True, False, True]
    assert "".join(t for t, _ in doc) == load_documents(data, chat=chat_renderer(tok))[0]
    ids, mask = tokenize_with_mask([doc], tok)
    name = tok.tokenizer.id_to_token
    kept = [name(i) for i, m in zip(ids.tolist(), mask.tolist(), strict=True) if m]
    assert kept == ["<|im_start|>", "assistant", "<tool_call>", "get_weather", "</tool_call>",
                    "<|im_end|>", "<|im_start|>", "assistant", "sunny", "<|im_end|>",
                    "</s>"]  # fmt: skip
    # The tool's "sunny" (a result) is in the stream but not trained on.
    sunny = tok.tokenizer.token_to_id("sunny")
    positions = [i for i, t in enumerate(ids.tolist()) if t == sunny]
    assert [bool(mask[i]) for i in positions] == [False, True]


def test_without_a_template_the_markers_carry_the_tools_and_calls():
    text = render_chat(CHAT, TOOLS)
    assert text.startswith("<|tools|>\n") and '"get_weather"' in text
    assert '<|assistant|>\n<tool_call>{"name": "get_weather", ' in text
    assert "<|tool|>\nsunny\n" in text
    segments = assistant_segments(render_chat)(CHAT, TOOLS)
    assert [trained for _, trained in segments] == [False, True, False, True]
    assert segments[0][0].startswith("<|tools|>")  # the tools go with the prompt


@pytest.mark.parametrize(
    ("message", "why"),
    [({"role": "assistant", "content": None}, "null only with tool_calls"),
     ({"role": "assistant", "content": None, "tool_calls": []}, "tool_calls must be"),
     ({"role": "assistant", "content": "x", "tool_calls": ["f"]}, "tool_calls must be")],
)  # fmt: skip
def test_malformed_tool_messages_are_refused(message, why):
    with pytest.raises(ValueError, match=why):
        render_chat([{"role": "user", "content": "hi"}, message])
