"""`python -m trainer.export`: a DCP training checkpoint -> an HF Llama directory that
our model and transformers both load with the original logits."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import subprocess
import sys
import uuid
import warnings
from pathlib import Path
from unittest import mock

import pytest
import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file

from tests.trainer.conftest import ROOT, parse_lines, trainer_env
from trainer import hf, hf_config
from trainer.checkpoint_layout import CONFIG_FILE, MARKER, TOKENIZER_DIR
from trainer.config import ModelConfig, RopeScaling, TrainConfig
from trainer.export import main as export_main
from trainer.model import Transformer

CFG = ModelConfig(
    dim=64,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    vocab_size=300,
    max_seq_len=64,
    rope_scaling=RopeScaling(factor=8.0, original_max_position_embeddings=16),
    tie_word_embeddings=True,
)
TOKENS = torch.randint(0, CFG.vocab_size, (2, 40), generator=torch.Generator().manual_seed(1))


def make(cfg: ModelConfig, seed: int) -> Transformer:
    torch.manual_seed(seed)
    model = Transformer(cfg).eval()
    with torch.no_grad():  # norms start at 1: random ones catch a misplaced norm
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.uniform_(0.5, 1.5)
    return model


def write_step(
    root: Path, step: int, model: Transformer, complete: bool = True, tokenizer: bool = True
) -> Path:
    """A step directory laid out as the trainer writes it (DCP files, train_config.json,
    tokenizer/, COMPLETE last); the state dict has the trainer's top-level keys."""
    path = root / f"step-{step}"
    optim = {"lr": torch.tensor(1e-3)}
    state = {"model": model.state_dict(), "optim": optim, "train": {"step": step}}
    with warnings.catch_warnings():  # "assuming the intent is to save in a single process"
        warnings.simplefilter("ignore", UserWarning)
        dcp.save(state, checkpoint_id=str(path), no_dist=True)
    run = TrainConfig(model=model.cfg)
    (path / CONFIG_FILE).write_text(json.dumps(dataclasses.asdict(run), indent=2))
    if tokenizer:  # a run with the byte tokenizer (the default) ships none
        write_tokenizer(path / TOKENIZER_DIR)
    if complete:
        (path / MARKER).write_text(json.dumps({"step": step, "world_size": 1}))
    return path


def write_tokenizer(directory: Path) -> None:
    from tokenizers import Tokenizer, models

    directory.mkdir(parents=True, exist_ok=True)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "hello": 3}
    Tokenizer(models.WordLevel(vocab, unk_token="<unk>")).save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))


@dataclasses.dataclass
class Exported:
    returncode: int
    stdout: str
    stderr: str = ""


def run_export(*args: str, env: dict[str, str] | None = None) -> tuple[Exported, dict]:
    """`trainer.export`'s main(argv) in this process (a process of its own costs a torch
    import: seconds of CPU each); its stdout must still be exactly one JSON line. The
    command line itself (`python -m trainer.export`, exit status) is run_export_process."""
    out = io.StringIO()
    with mock.patch.dict(os.environ, env or {}), contextlib.redirect_stdout(out):
        code = export_main(list(args))
    events = parse_lines(out.getvalue())
    assert len(events) == 1, out.getvalue()
    return Exported(code, out.getvalue()), events[0]


def run_export_process(*args: str) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "trainer.export", *args],
        cwd=ROOT,
        env=trainer_env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    events = parse_lines(proc.stdout)
    assert len(events) == 1, proc.stdout + proc.stderr
    return proc, events[0]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> tuple[Path, Transformer]:
    """step-2 complete, step-5 complete (the one to export), step-7 interrupted."""
    root = tmp_path_factory.mktemp("checkpoints")
    write_step(root, 2, make(CFG, seed=2))
    newest = make(CFG, seed=5)
    write_step(root, 5, newest)
    write_step(root, 7, make(CFG, seed=7), complete=False)
    return root, newest


def logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        out = model(TOKENS)
    return getattr(out, "logits", out)


def test_export_picks_the_newest_complete_step_and_keeps_the_logits(checkpoints, tmp_path):
    root, original = checkpoints
    out = tmp_path / "hf"
    proc, event = run_export("--checkpoint", str(root), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert event["event"] == "exported" and event["step"] == 5 and event["out"] == str(out)
    assert event["files"] == sorted(
        [
            "config.json",
            "generation_config.json",
            "model.safetensors",
            "tokenizer.json",
            "tokenizer_config.json",
        ]
    )
    assert event["params"] == sum(p.numel() for p in original.parameters())  # tied: counted once
    weights = load_file(out / "model.safetensors")
    assert "lm_head.weight" not in weights and all(
        t.dtype == torch.float32 for t in weights.values()
    )
    assert json.loads((out / "generation_config.json").read_text())["eos_token_id"] == 2

    ours = make(hf_config.read_model_config(str(out)), seed=0)
    hf.load_hf_weights(ours, str(out))
    torch.testing.assert_close(logits(ours), logits(original), rtol=0, atol=0)

    transformers = pytest.importorskip("transformers")
    theirs = transformers.LlamaForCausalLM.from_pretrained(
        out, dtype=torch.float32, attn_implementation="sdpa"
    ).eval()
    torch.testing.assert_close(logits(theirs), logits(original), rtol=0, atol=1e-5)


def test_a_byte_tokenizer_run_exports_an_equivalent_tokenizer(tmp_path):
    """A byte-level run ships no tokenizer files; the export writes tokenizer.json etc.
    with the very same ids, so transformers (and a server) load a complete model."""
    step = write_step(tmp_path / "ckpt", 3, make(CFG, seed=3), tokenizer=False)
    out = tmp_path / "hf"
    proc, event = run_export("--checkpoint", str(step), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"} <= set(
        event["files"]
    )
    config = json.loads((out / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"]) == (256, 257)

    from trainer.tokenizer import ByteTokenizer

    transformers = pytest.importorskip("transformers")
    theirs = transformers.AutoTokenizer.from_pretrained(out)
    text = "Hello, wörld ☃ 😀\n\tend"
    assert theirs(text).input_ids == ByteTokenizer().encode(text, eos=False)
    assert theirs.decode(theirs(text).input_ids, skip_special_tokens=True) == text
    prompt = theirs.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert prompt == "<s><|user|>\nhi\n<|assistant|>\n"


def test_export_of_a_step_dir_in_bfloat16(checkpoints, tmp_path):
    root, _ = checkpoints
    proc, event = run_export(
        "--checkpoint", str(root / "step-2"), "--out", str(tmp_path), "--dtype", "bfloat16"
    )
    assert proc.returncode == 0, proc.stderr
    assert event["step"] == 2
    weights = load_file(tmp_path / "model.safetensors")
    assert all(t.dtype == torch.bfloat16 for t in weights.values())
    expected = make(CFG, seed=2).embed_tokens.weight.detach().to(torch.bfloat16)
    torch.testing.assert_close(weights["model.embed_tokens.weight"], expected, rtol=0, atol=0)
    assert json.loads((tmp_path / "config.json").read_text())["torch_dtype"] == "bfloat16"


@pytest.mark.parametrize(
    "target, message",
    [
        ("empty-root", "no complete, intact checkpoint under"),
        ("step-7", "is not complete"),
        ("missing", "does not exist"),
        ("wrong-config", "does not match its train_config.json: layers.2."),
    ],
)
def test_bad_checkpoint_is_exit_2_with_an_error_line(checkpoints, tmp_path, target, message):
    root, _ = checkpoints
    path = {"step-7": root / "step-7", "missing": tmp_path / "nope"}.get(target, tmp_path / "c")
    if target == "empty-root":
        write_step(path, 1, make(CFG, seed=1), complete=False)
    if target == "wrong-config":  # the config says 3 layers, the weights have 2
        config = write_step(path, 1, make(CFG, seed=1)) / CONFIG_FILE
        run = json.loads(config.read_text())
        run["model"]["n_layers"] = 3
        config.write_text(json.dumps(run))
    proc, event = run_export("--checkpoint", str(path), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert event["event"] == "error" and event["error_type"] == "ConfigError"
    assert message in event["message"]
    assert not (tmp_path / "out").exists()


def test_missing_flag_is_an_error_line_too():
    proc, event = run_export_process("--out", "x")  # the command line's own exit status
    assert proc.returncode == 2 and event["event"] == "error"
    assert "--checkpoint" in event["message"]


@pytest.mark.integration
def test_export_from_and_to_s3(checkpoints, moto_server, tmp_path):
    import boto3

    root, original = checkpoints
    s3 = boto3.client("s3")
    bucket = f"ckpt-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        s3.upload_file(str(path), bucket, f"run/{path.relative_to(root).as_posix()}")

    env = {**moto_server.env, "FSDP_EKS_CACHE_DIR": str(tmp_path / "cache")}
    proc, event = run_export(
        "--checkpoint", f"s3://{bucket}/run", "--out", f"s3://{bucket}/export/v1", env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert event["event"] == "exported" and event["step"] == 5
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix="export/")["Contents"]]
    assert {"export/v1/config.json", "export/v1/model.safetensors"} <= set(keys)
    assert not (tmp_path / "cache").exists()  # the checkpoint went to a temp dir

    s3.download_file(bucket, "export/v1/model.safetensors", str(tmp_path / "model.safetensors"))
    weights = load_file(tmp_path / "model.safetensors")
    for name, tensor in original.state_dict().items():
        if name != "lm_head.weight":
            torch.testing.assert_close(weights[f"model.{name}"], tensor, rtol=0, atol=0)

    # A step prefix that is not complete is refused before anything is downloaded.
    proc, event = run_export(
        "--checkpoint", f"s3://{bucket}/run/step-7", "--out", str(tmp_path / "o"), env=env
    )
    assert proc.returncode == 2 and "is not complete" in event["message"]
