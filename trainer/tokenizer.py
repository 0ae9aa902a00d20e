"""Tokenizers: the built-in byte-level one, or any Hugging Face `tokenizer.json`.

Both expose the same small interface, all the trainer needs:

    n_vocab            ids are in [0, n_vocab): the model's vocab_size must be >= this
    bos_id, eos_id     document delimiters (None when the tokenizer has none)
    encode(text, bos=True, eos=True) -> list[int]
    encode_batch(texts, bos=True, eos=True) -> list[list[int]]
    decode(ids) -> str
    files              local files a checkpoint/export copies so the model ships with
                       its tokenizer ([] for the byte tokenizer: nothing to ship)

`load_tokenizer(spec)` picks one from the `--tokenizer` setting: None, a local
tokenizer.json or a directory holding one, an s3:// URI of either, or a hub name.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainer import hub, storage
from trainer.config import ConfigError

TOKENIZER_FILE = "tokenizer.json"
# Shipped next to tokenizer.json by HF models; transformers' AutoTokenizer reads the
# special tokens and chat template from them, so an export should carry them too.
SIDECAR_FILES = ("tokenizer_config.json", "special_tokens_map.json")

# Document delimiters of common tokenizers, most specific first: Llama 3, Llama 2 /
# Mistral, Gemma, GPT-2 / GPT-NeoX, BERT. "<|eot_id|>" is left out on purpose: it
# ends a chat turn, not a document, and Llama 3 tokenizers all have <|end_of_text|>.
BOS_CANDIDATES = ("<|begin_of_text|>", "<s>", "<bos>", "<|startoftext|>", "[CLS]")
EOS_CANDIDATES = ("<|end_of_text|>", "</s>", "<eos>", "<|endoftext|>", "[SEP]")

NO_INTERNET_HINT = "pass a local/s3 tokenizer.json; this host may have no internet"


class ByteTokenizer:
    """UTF-8 bytes are ids 0-255, then BOS, EOS and PAD: any text, no vocabulary file."""

    bos_id = 256
    eos_id = 257
    pad_id = 258
    n_vocab = 259  # the model's vocab_size must be >= this (presets use 512)
    chat_template = None  # chat records use data.render_chat's markers

    def __init__(self) -> None:
        self.files: list[Path] = []

    def encode(self, text: str, bos: bool = True, eos: bool = True) -> list[int]:
        ids = list(text.encode("utf-8"))
        return ([self.bos_id] if bos else []) + ids + ([self.eos_id] if eos else [])

    def encode_batch(self, texts: list[str], bos: bool = True, eos: bool = True) -> list[list[int]]:
        return [self.encode(t, bos, eos) for t in texts]

    def decode(self, ids: list[int]) -> str:
        # Special ids are dropped; a byte sequence cut mid-character decodes to U+FFFD.
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")

    def save_hf(self, directory: Path) -> list[Path]:
        """This tokenizer as Hugging Face files (tokenizer.json, tokenizer_config.json,
        special_tokens_map.json) with the very same ids, so an export of a byte-level
        run loads in transformers and vLLM with a tokenizer: a byte-level BPE with no
        merges (each byte is its own id) plus <s>, </s>, <pad> at 256-258. Prompts get
        BOS in front as in training; the chat template is render_chat's markers."""
        from tokenizers import AddedToken, decoders, models, pre_tokenizers, processors
        from tokenizers import Tokenizer as HFCore

        byte_char = _gpt2_byte_chars()
        core = HFCore(models.BPE(vocab={byte_char[b]: b for b in range(256)}, merges=[]))
        core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
        core.decoder = decoders.ByteLevel()
        specials = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"}
        core.add_special_tokens([AddedToken(t, special=True) for t in specials.values()])
        core.post_processor = processors.TemplateProcessing(
            single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", self.bos_id)]
        )
        assert [core.token_to_id(t) for t in specials.values()] == [
            self.bos_id,
            self.eos_id,
            self.pad_id,
        ]
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        core.save(str(directory / TOKENIZER_FILE))
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            **specials,
            "add_bos_token": True,
            "clean_up_tokenization_spaces": False,
            "chat_template": BYTE_CHAT_TEMPLATE,
        }
        files = [directory / TOKENIZER_FILE]
        for name, data in (
            ("tokenizer_config.json", config),
            ("special_tokens_map.json", specials),
        ):
            (directory / name).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
            files.append(directory / name)
        return files


# render_chat's blocks (data.py), with the assistant's marker as the generation prompt.
BYTE_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def _gpt2_byte_chars() -> dict[int, str]:
    """GPT-2's byte -> printable character table, which the ByteLevel pre-tokenizer
    maps bytes through (printable ASCII and Latin-1 stand for themselves)."""
    keep = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("\xa1"), ord("\xac") + 1),
        *range(ord("\xae"), ord("\xff") + 1),
    ]
    chars = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


class HFTokenizer:
    """A `tokenizers.Tokenizer` with BOS/EOS added by us, not by its post-processor.

    Post-processors differ between models (some add BOS, some BOS+EOS, some nothing),
    so encoding always uses add_special_tokens=False and the delimiters are added
    here, exactly like the byte tokenizer does: BOS + text + EOS per document.
    """

    def __init__(self, tokenizer: Any, files: list[Path] | None = None) -> None:
        self.tokenizer = tokenizer
        self.files = list(files or [])
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        # Ids index the embedding table: cover the largest id even if the vocabulary
        # has holes (get_vocab_size alone would then be too small).
        self.n_vocab = max(
            tokenizer.get_vocab_size(with_added_tokens=True), max(vocab.values(), default=-1) + 1
        )
        declared = _declared_special_tokens(self.files)
        self.bos_id = self._find_id(declared.get("bos_token"), BOS_CANDIDATES)
        self.eos_id = self._find_id(declared.get("eos_token"), EOS_CANDIDATES)
        source = _declared_chat_template(self.files)
        self.chat_template = None if source is None else self._compile(source, declared)

    def _compile(self, source: str, declared: dict[str, str]) -> Any:
        """messages -> text through the model's own Jinja chat template, as transformers'
        apply_chat_template renders it (sandboxed, no generation prompt). The BOS token
        renders empty: encode() adds BOS to every document already."""
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise ValueError(f"chat template: {message}")

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
        )
        env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
        env.globals["raise_exception"] = raise_exception
        template = env.from_string(source)
        eos = declared.get("eos_token", "")

        def render(messages: Any, tools: Any = None) -> str:
            return template.render(
                messages=messages,
                tools=tools,
                bos_token="",
                eos_token=eos,
                add_generation_prompt=False,
            )

        return render

    def _find_id(self, declared: str | None, candidates: tuple[str, ...]) -> int | None:
        # The model's own tokenizer_config.json wins; else the first known token present.
        for token in (declared, *candidates):
            if token is not None and (token_id := self.tokenizer.token_to_id(token)) is not None:
                return token_id
        return None

    def _wrap(self, ids: list[int], bos: bool, eos: bool) -> list[int]:
        head = [self.bos_id] if bos and self.bos_id is not None else []
        tail = [self.eos_id] if eos and self.eos_id is not None else []
        return head + ids + tail

    def encode(self, text: str, bos: bool = True, eos: bool = True) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        return self._wrap(ids, bos, eos)

    def encode_batch(self, texts: list[str], bos: bool = True, eos: bool = True) -> list[list[int]]:
        # One call into Rust, which tokenizes in parallel: much faster on big datasets.
        encodings = self.tokenizer.encode_batch(texts, add_special_tokens=False)
        return [self._wrap(e.ids, bos, eos) for e in encodings]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


Tokenizer = ByteTokenizer | HFTokenizer


def _declared_chat_template(files: list[Path]) -> str | None:
    """tokenizer_config.json's `chat_template` (the default one of a named list)."""
    for file in files:
        if file.name != "tokenizer_config.json":
            continue
        try:
            template = json.loads(file.read_text(encoding="utf-8")).get("chat_template")
        except (OSError, ValueError, AttributeError):
            return None
        if isinstance(template, list):  # [{"name": "default", "template": "..."}, ...]
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        return template if isinstance(template, str) else None
    return None


def _declared_special_tokens(files: list[Path]) -> dict[str, str]:
    """bos_token/eos_token from tokenizer_config.json or special_tokens_map.json."""
    found: dict[str, str] = {}
    for file in files:
        if file.name not in SIDECAR_FILES:
            continue
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a sidecar is a hint only; tokenizer.json alone is enough
        for key in ("bos_token", "eos_token"):
            value = data.get(key) if isinstance(data, dict) else None
            if isinstance(value, dict):  # {"content": "<s>", "lstrip": false, ...}
                value = value.get("content")
            if isinstance(value, str):
                found.setdefault(key, value)
    return found


def load_tokenizer(spec: str | None) -> Tokenizer:
    """The tokenizer named by `--tokenizer`.

    None                      the byte tokenizer
    path/to/tokenizer.json    that file (a tokenizer_config.json next to it is read too)
    path/to/dir               dir/tokenizer.json
    s3://bucket/.../x.json    the object, plus the sidecar files next to it if present
    s3://bucket/prefix        prefix/tokenizer.json and its sidecars; only these are
                              fetched, never the rest of a model directory (weights)
    org/name                  Tokenizer.from_pretrained from the Hugging Face hub
    """
    if spec is None:
        return ByteTokenizer()
    if storage.is_s3(spec):
        return _from_files(_fetch_s3_tokenizer(spec), spec)
    path = Path(spec).expanduser()
    if path.is_dir():
        path = path / TOKENIZER_FILE
        if not path.is_file():
            raise ConfigError(f"tokenizer directory {spec!r} has no {TOKENIZER_FILE}")
    if path.is_file():
        siblings = [path.parent / name for name in SIDECAR_FILES]
        return _from_files([path, *(p for p in siblings if p.is_file())], spec)
    if spec.endswith(".json") or path.is_absolute() or spec.startswith((".", "~")):
        raise ConfigError(f"tokenizer {spec!r} does not exist")
    return _from_hub(spec)


def _fetch_s3_tokenizer(uri: str) -> list[Path]:
    if uri.endswith(".json"):
        base, _, name = uri.rpartition("/")
    else:
        base, name = uri.rstrip("/"), TOKENIZER_FILE
    try:
        files = [storage.fetch(storage.join(base, name))]
    except FileNotFoundError as exc:
        raise ConfigError(f"no tokenizer at {storage.join(base, name)}") from exc
    for sidecar in SIDECAR_FILES:
        try:
            files.append(storage.fetch(storage.join(base, sidecar)))
        except FileNotFoundError:
            pass  # optional
    return files


def _from_files(files: list[Path], spec: str) -> HFTokenizer:
    from tokenizers import Tokenizer as RustTokenizer

    try:
        rust = RustTokenizer.from_file(str(files[0]))
    except Exception as exc:  # the Rust side raises a bare Exception on bad JSON
        raise ConfigError(f"tokenizer {spec!r} is not a valid tokenizer.json: {exc}") from exc
    return HFTokenizer(rust, files)


def _from_hub(name: str) -> HFTokenizer:
    """A hub repo's tokenizer.json (and sidecars), downloaded once per node like a hub
    model's files (trainer/hub.py), so checkpoints and exports ship it as any other."""
    if not hub.is_hub_id(name):
        raise ConfigError(f"tokenizer {name!r} is not a local path, an s3:// URI or a hub id")
    try:
        directory = Path(hub.local_dir(name, hub.TOKENIZER_FILES, what="tokenizer"))
    except ConfigError:
        raise
    except Exception as exc:  # network, hub down: the hub's message says which
        raise ConfigError(
            f"could not load tokenizer {name!r} from the Hugging Face hub ({exc}); "
            f"{NO_INTERNET_HINT}"
        ) from exc
    if not (directory / TOKENIZER_FILE).is_file():
        raise ConfigError(f"hub repo {name!r} has no {TOKENIZER_FILE}")
    files = [directory / TOKENIZER_FILE]
    files += [directory / n for n in SIDECAR_FILES if (directory / n).is_file()]
    return _from_files(files, name)
