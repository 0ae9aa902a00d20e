"""The model server's vLLM release loads what the trainer exports: the export's config,
generation config and tokenizer are read with the transformers that vLLM release
resolves to (VLLM_TRANSFORMERS, installed apart from ours by `make setup-dev`), in a
process that sees only that transformers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from skills.model_server.kubernetes.settings import VLLM_IMAGE, VLLM_TRANSFORMERS
from tests.trainer.conftest import ROOT
from tests.trainer.test_export import CFG, make, run_export, write_step
from trainer.tokenizer import ByteTokenizer

TEXT = "Hello, wörld ☃ 😀\n\tend"
VLLM_TF = ROOT / ".venv" / "vllm-transformers"
LOAD = """
import json, sys
import transformers
from transformers import AutoConfig, AutoTokenizer, GenerationConfig
out = sys.argv[1]
config = AutoConfig.from_pretrained(out)
tokenizer = AutoTokenizer.from_pretrained(out)
generation = GenerationConfig.from_pretrained(out)
text = sys.argv[2]
ids = tokenizer(text).input_ids
print(json.dumps({
    "transformers": transformers.__version__,
    "config_class": type(config).__name__,
    "architectures": config.architectures,
    "hidden_size": config.hidden_size,
    "vocab_size": config.vocab_size,
    "eos_token_id": generation.eos_token_id,
    "ids": ids,
    "decoded": tokenizer.decode(ids, skip_special_tokens=True),
    "chat": tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    ),
}))
"""


def test_the_export_loads_with_the_transformers_of_the_servers_vllm(tmp_path: Path):
    assert VLLM_IMAGE.endswith(":v0.34.0")
    assert (VLLM_TF / "transformers").is_dir(), "run `make setup-dev` (vLLM's transformers)"
    root = tmp_path / "checkpoints"
    write_step(root, 1, make(CFG, seed=1), tokenizer=False)  # a byte-level run
    out = tmp_path / "hf"
    proc, event = run_export("--checkpoint", str(root), "--out", str(out))
    assert proc.returncode == 0 and event["event"] == "exported", proc.stderr
    written = json.loads((out / "config.json").read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env |= {"PYTHONPATH": str(VLLM_TF), "HF_HUB_OFFLINE": "1", "PYTHONNOUSERSITE": "1"}
    loaded = subprocess.run(
        [sys.executable, "-S", "-c", LOAD, str(out), TEXT],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    got = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert got["transformers"] == VLLM_TRANSFORMERS
    assert got["config_class"] == "LlamaConfig" and got["architectures"] == ["LlamaForCausalLM"]
    assert (got["hidden_size"], got["vocab_size"]) == (
        written["hidden_size"],
        written["vocab_size"],
    )
    assert got["eos_token_id"] == written["eos_token_id"] == 257
    assert got["ids"] == ByteTokenizer().encode(TEXT, eos=False) and got["decoded"] == TEXT
    assert got["chat"] == "<s><|user|>\nhi\n<|assistant|>\n"


@pytest.mark.parametrize("version", [VLLM_TRANSFORMERS])
def test_vllm_transformers_is_not_ours(version: str):
    # The point of the separate install: our venv's transformers is another release.
    import transformers

    assert transformers.__version__ != version
