"""Hub ids inside the job (trainer/hub.py, data.hub_documents, stream.StreamBatches),
against a local stand-in of the Hugging Face Hub's HTTP API (tests/services/hf_hub.py)
reached through HF_ENDPOINT: never the network."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from tests.services.hf_hub import HubRepo, hub_server
from tests.trainer.conftest import launch, parse_lines, spawn, trainer_env
from tests.trainer.test_data_sources import build_tokenizer
from tests.trainer.test_hf import SMALL, make
from trainer import hf, hf_config, hub
from trainer.config import ConfigError
from trainer.data import IGNORE_INDEX, hub_documents, render_chat
from trainer.stream import StreamBatches
from trainer.tokenizer import ByteTokenizer, load_tokenizer

TOKEN = "hf_" + "StandIn" * 5  # the token shape, so the log masking would catch it too
SHARDS = 16
README = b"""---
configs:
- config_name: en
  data_files:
  - split: train
    path: "en/train-*.jsonl"
---
A tiny C4: 16 JSONL shards of the `en` config.
"""


def model_files(tmp_path) -> dict[str, bytes]:
    """A tiny Llama checkpoint (hidden 64, 2 layers) with its tokenizer, as repo files."""
    out = tmp_path / "model"
    hf.save_hf(
        make(SMALL).state_dict(), SMALL, out, tokenizer_dir=build_tokenizer(tmp_path / "tok").parent
    )
    return {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}


def dataset_files() -> dict[str, bytes]:
    files = {"README.md": README}
    for s in range(SHARDS):
        rows = [
            {"text": f"Shard {s} document {i}: fully sharded data parallel training. " * 4,
             "url": f"https://example.com/{s}/{i}"}
            for i in range(300)
        ]  # fmt: skip
        files[f"en/train-{s:05d}-of-{SHARDS:05d}.jsonl"] = "".join(
            json.dumps(r) + "\n" for r in rows
        ).encode()
    return files


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    files = model_files(tmp_path)
    repos = {
        "stand/tiny-llama": HubRepo("model", files),
        "stand/gated-llama": HubRepo("model", files, gated=True),
        "stand/tiny-c4": HubRepo("dataset", dataset_files()),
        "stand/other-c4": HubRepo("dataset", dataset_files()),
    }
    with hub_server(repos, token=TOKEN) as server:
        for name, value in server.env.items():
            monkeypatch.setenv(name, value)
        # The cache of this test only; no token unless a test sets one.
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
        monkeypatch.delenv("HF_HUB_CACHE", raising=False)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
        yield server


def dataset_bytes(files: dict[str, bytes]) -> int:
    return sum(len(v) for k, v in files.items() if k.startswith("en/"))


# --- ids ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "is_id"),
    [("meta-llama/Llama-3.1-8B", True), ("allenai/c4", True), ("org/name.v2", True),
     ("s3://bucket/model", False), ("./org/name", False), ("/abs/path", False),
     ("name-only", False), ("a/b/c", False), ("data/train.jsonl", False), ("org/na me", False),
     ("", False)],
)  # fmt: skip
def test_hub_id_shape(source, is_id):
    assert hub.is_hub_id(source) is is_id


def test_an_existing_local_dir_named_like_an_id_is_local(tmp_path, monkeypatch):
    (tmp_path / "org" / "name").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert not hub.is_hub_id("org/name")
    assert hub.local_dir("org/name") == "org/name"  # passed through, nothing fetched


# --- the model --------------------------------------------------------------------------


def test_hub_model_downloads_once_and_loads_like_a_local_dir(stand_in, tmp_path):
    cfg = hf_config.read_model_config("stand/tiny-llama")
    assert (cfg.dim, cfg.n_layers, cfg.vocab_size) == (SMALL.dim, SMALL.n_layers, SMALL.vocab_size)
    model = make(SMALL, seed=1)
    hf.load_hf_weights(model, "stand/tiny-llama")  # the same snapshot: no second download
    expected = make(SMALL)
    for (name, got), want in zip(
        model.state_dict().items(), expected.state_dict().values(), strict=True
    ):
        assert torch.equal(got, want), name
    tok = load_tokenizer("stand/tiny-llama")
    assert tok.n_vocab <= SMALL.vocab_size and tok.files[0].name == "tokenizer.json"
    assert stand_in.file_gets("stand/tiny-llama", "model.safetensors") == 1
    assert stand_in.file_gets("stand/tiny-llama", "config.json") == 1
    # Into HF_HOME (the deployers point it at the checkpoint/FSx volume), nowhere else.
    assert str(tmp_path / "hf-home") in hub.local_dir("stand/tiny-llama")


def test_gated_model_without_a_token_is_a_config_error_with_the_hint(stand_in):
    with pytest.raises(ConfigError, match="gated hub repo and no HF_TOKEN is set") as info:
        hf_config.read_model_config("stand/gated-llama")
    assert "accepted the model's licence" in str(info.value)
    assert stand_in.file_gets("stand/gated-llama") == 0


def test_gated_model_with_a_wrong_token_never_echoes_it(stand_in, monkeypatch):
    wrong = "hf_" + "WrongOne" * 5
    monkeypatch.setenv("HF_TOKEN", wrong)
    with pytest.raises(ConfigError, match="the HF_TOKEN given has no access") as info:
        hf_config.read_model_config("stand/gated-llama")
    assert wrong not in str(info.value) and wrong not in repr(info.value.__cause__)


def test_gated_model_with_the_token_downloads(stand_in, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert hf_config.read_model_config("stand/gated-llama").dim == SMALL.dim
    assert stand_in.file_gets("stand/gated-llama", "model.safetensors") == 1


def test_unknown_repo_is_a_config_error(stand_in):
    with pytest.raises(ConfigError, match="not a local path, an s3:// URI or a hub repo"):
        hf_config.read_model_config("stand/no-such-model")


# --- the download's record: trusted while it matches the world -------------------------

MODEL = "stand/tiny-llama"


def requests_since(stand_in, before: int) -> list[tuple[str, str]]:
    return [(method, path) for method, path, _, _ in stand_in.requests[before:]]


def push_a_fix(stand_in) -> bytes:
    """The owner pushes a new config.json: the repo's main is another commit."""
    files = stand_in.repos[MODEL].files
    config = json.loads(files["config.json"])
    files["config.json"] = json.dumps({**config, "fixed_by_owner": True}).encode()
    return files["config.json"]


def test_an_unchanged_repo_costs_one_metadata_request_and_no_download(stand_in):
    first = hub.local_dir(MODEL)
    before = len(stand_in.requests)
    assert hub.local_dir(MODEL) == first
    assert requests_since(stand_in, before) == [("GET", f"/api/models/{MODEL}/revision/main")]


def test_a_fix_pushed_to_the_repo_reaches_the_next_job(stand_in):
    first = hub.local_dir(MODEL)
    fixed = push_a_fix(stand_in)
    second = hub.local_dir(MODEL)
    assert second != first and Path(second).name == stand_in.repos[MODEL].sha
    assert Path(second, "config.json").read_bytes() == fixed
    assert stand_in.file_gets(MODEL, "config.json") == 2
    assert stand_in.file_gets(MODEL, "model.safetensors") == 1  # unchanged: the cache's


def test_a_cache_whose_blobs_were_removed_is_downloaded_again(stand_in, tmp_path):
    first = hub.local_dir(MODEL)
    shutil.rmtree(tmp_path / "hf-home" / "hub" / f"models--{MODEL.replace('/', '--')}" / "blobs")
    assert not Path(first, "config.json").is_file()  # a dangling link
    again = hub.local_dir(MODEL)
    assert hf_config.read_model_config(again).dim == SMALL.dim
    assert stand_in.file_gets(MODEL, "model.safetensors") == 2


def test_offline_the_intact_files_are_used_without_a_request(stand_in, monkeypatch):
    first = hub.local_dir(MODEL)
    push_a_fix(stand_in)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    before = len(stand_in.requests)
    assert hub.local_dir(MODEL) == first
    assert requests_since(stand_in, before) == []


def test_a_hub_that_cannot_be_reached_leaves_the_intact_files_in_use(stand_in, monkeypatch):
    first = hub.local_dir(MODEL)
    with socket.socket() as closed:  # a port nothing listens on once it is closed
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    assert hub.local_dir(MODEL) == first


def test_a_pinned_commit_is_trusted_without_a_request(stand_in):
    sha = stand_in.repos[MODEL].sha
    pinned = hub.local_dir(MODEL, revision=sha)
    assert Path(pinned).name == sha
    before = len(stand_in.requests)
    assert hub.local_dir(MODEL, revision=sha) == pinned
    assert requests_since(stand_in, before) == []


def test_a_repo_gone_since_the_download_is_a_config_error(stand_in):
    hub.local_dir(MODEL)
    stand_in.repos[MODEL].gated = True  # the owner gated it: this job has no token
    with pytest.raises(ConfigError, match="gated hub repo and no HF_TOKEN is set"):
        hub.local_dir(MODEL)


def _local_dir_in_rank(rank: int, out: str) -> None:
    path = hub.local_dir(MODEL)
    Path(f"{out}.{rank}").write_text(
        json.dumps({"path": path, "config": Path(path, "config.json").read_text()})
    )


def test_two_ranks_after_a_push_download_the_fix_once(stand_in, tmp_path):
    hub.local_dir(MODEL)
    fixed = push_a_fix(stand_in)
    before = len(stand_in.requests)
    spawn(_local_dir_in_rank, (str(tmp_path / "rank"),), 2)
    got = [json.loads(Path(tmp_path / f"rank.{r}").read_text()) for r in range(2)]
    assert got[0] == got[1] and got[0]["config"] == fixed.decode()
    assert stand_in.file_gets(MODEL, "config.json") == 2  # once for the node, not per rank
    # The rank that waited on the lock trusts the check just made (at most a second one
    # where it came after the first rank had finished).
    api = [r for r in requests_since(stand_in, before) if r[1].startswith("/api/")]
    assert 2 <= len(api) <= 3, api


def _local_dir_queued(rank: int, out: str) -> None:
    Path(f"{out}.{rank}.queued").touch()  # then waits on the node's lock
    _local_dir_in_rank(rank, out)


def test_ranks_queued_on_the_node_lock_ask_the_hub_once_between_them(stand_in, tmp_path):
    """Four ranks of one node ask for the model while the node's lock is held (as by a
    rank still downloading): the first through checks the hub and downloads the fix;
    the three behind it trust that check, and ask the hub nothing."""
    hub.local_dir(MODEL)
    push_a_fix(stand_in)
    before = len(stand_in.requests)
    hub.local_dir(MODEL)  # one process alone after a push: what it asks of the hub
    single = [r for r in requests_since(stand_in, before) if r[1].startswith("/api/")]
    files = stand_in.repos[MODEL].files  # the owner pushes again
    fixed = json.dumps({**json.loads(files["config.json"]), "fixed_again": True}).encode()
    files["config.json"] = fixed
    (lock,) = (hub._cache_root() / ".locks").glob("*.lock")
    before = len(stand_in.requests)
    ranks, out = 4, str(tmp_path / "rank")
    failed: list[BaseException] = []

    def run() -> None:
        try:
            spawn(_local_dir_queued, (out,), ranks)
        except BaseException as exc:  # noqa: BLE001 (asserted below)
            failed.append(exc)

    with hub._node_lock(lock):
        ranks_run = threading.Thread(target=run)
        ranks_run.start()
        deadline = time.monotonic() + 120
        while not all(Path(f"{out}.{r}.queued").exists() for r in range(ranks)):
            assert time.monotonic() < deadline and ranks_run.is_alive(), failed
            time.sleep(0.05)
        time.sleep(1.0)  # each rank is past its `asked` and blocked on the lock
    ranks_run.join(timeout=120)
    assert not failed and not ranks_run.is_alive(), failed
    got = [json.loads(Path(f"{out}.{r}").read_text()) for r in range(ranks)]
    assert all(g == got[0] for g in got) and got[0]["config"] == fixed.decode()
    assert stand_in.file_gets(MODEL, "config.json") == 3  # each commit once for the node
    api = [r for r in requests_since(stand_in, before) if r[1].startswith("/api/")]
    assert len(api) == len(single), (api, single)  # as one rank alone: none per rank


# --- the dataset, streamed --------------------------------------------------------------


# datasets and huggingface_hub read HF_ENDPOINT once, at import: a stream is read in a
# child process with the stand-in's environment, as a job's rank would be. One child
# reads the given ranks' streams in turn, forked from the trainer tests' fork server
# (torch imported once; a python of its own cost ~4.5 CPU-s), which imports neither;
# it writes the start of each rank's first window, or the error it ended with.
def _stream(_: int, name: str, config: str, ranks: str, world: int, steps: int, out: str):
    # Imported below, after spawn set the stand-in's environment, not before.
    assert "huggingface_hub" not in sys.modules and "datasets" not in sys.modules
    with open(out, "w") as lines:
        try:
            for rank in map(int, ranks.split(",")):
                batches = StreamBatches(
                    lambda rank=rank: hub_documents(name, config, render_chat, rank, world),
                    ByteTokenizer(), seq_len=64, batch_size=4, world_size=world,
                )  # fmt: skip
                inputs, targets = next(batches)
                for _ in range(steps - 1):
                    next(batches)
                assert inputs.shape == targets.shape == (4, 64)
                assert (inputs[:, 1:] == targets[:, :-1]).all()
                start = bytes(inputs[0, 1:40].tolist()).decode()
                lines.write(json.dumps({"start": start}) + "\n")
        except Exception as exc:  # noqa: BLE001 (the test reads it)
            lines.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")


def stream_in_child(tmp_path, *args: object) -> list[dict]:
    out = tmp_path / "stream.jsonl"
    spawn(_stream, (*args, str(out)), 1)
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_hub_dataset_streams_only_what_the_steps_read(stand_in, tmp_path):
    total = dataset_bytes(stand_in.repos["stand/tiny-c4"].files)
    found = stream_in_child(tmp_path, "stand/tiny-c4", "en", "0,1", 2, 6)
    starts = [line["start"] for line in found if "start" in line]
    assert len(starts) == 2, found
    # Ranks read disjoint shards: rank 0 starts in shard 0, rank 1 in another.
    assert starts[0].startswith("Shard 0 ") and not starts[1].startswith("Shard 0 ")
    # Each rank read its first shard and no other (fsspec fetches a file this small in one
    # block; datasets opens it twice): 4 shards' bytes of the 16.
    served = stand_in.bytes_served("stand/tiny-c4", "en/")
    assert 0 < served <= 4 * total / SHARDS, (served, total)


def test_unknown_hub_dataset_is_a_config_error(stand_in, tmp_path):
    found = stream_in_child(tmp_path, "stand/nothing", "en", "0", 1, 1)
    assert found[-1]["error"].startswith("ConfigError: could not open hub dataset 'stand/nothing'")


def test_stream_resumes_where_the_job_was():
    docs = [f"document {i}: " + "words " * (i % 7 + 3) for i in range(6)]

    def batches(world_size: int = 1) -> StreamBatches:
        return StreamBatches(lambda: iter(docs), ByteTokenizer(), seq_len=16, batch_size=2,
                             world_size=world_size)  # fmt: skip

    straight = batches()
    expected = [next(straight) for _ in range(12)]
    first = batches()
    for _ in range(7):
        next(first)
    resumed = batches()
    resumed.load_state_dict(first.state_dict())
    for want in expected[7:]:  # past the end of the documents too: they start over
        got = next(resumed)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert resumed.epoch >= 1
    with pytest.raises(ValueError, match=r"another stream \(seq_len 16 -> 8\)"):
        StreamBatches(lambda: iter(docs), ByteTokenizer(), 8, 2, 1).load_state_dict(
            first.state_dict()
        )


@pytest.mark.parametrize("stopped_at", [1, 3, 7])
def test_a_two_rank_stream_resumes_each_rank_at_its_own_next_batch(stopped_at):
    """Two ranks, each its own share of the documents: saved after `stopped_at` steps (the
    position is the job's, 3 x 2 windows a step) and resumed, each rank gives
    the batches it would have given had the job not stopped."""
    shares = {
        rank: [f"rank {rank} document {i}: " + "words " * (i % 5 + 2) for i in range(5)]
        for rank in range(2)
    }

    def rank_stream(rank: int) -> StreamBatches:
        tokens = ByteTokenizer()
        return StreamBatches(lambda: iter(shares[rank]), tokens, 16, 3, world_size=2)

    for rank in range(2):
        straight = rank_stream(rank)
        expected = [next(straight) for _ in range(stopped_at + 4)]
        first = rank_stream(rank)
        for _ in range(stopped_at):
            next(first)
        assert first.state_dict()["stream_windows"] == stopped_at * 3 * 2
        resumed = rank_stream(rank)
        resumed.load_state_dict(first.state_dict())
        for step, want in enumerate(expected[stopped_at:], start=stopped_at):
            got = next(resumed)
            assert torch.equal(got[0], want[0]), (rank, step)


def test_stream_masks_chat_turns_and_wraps_a_short_share():
    chat = [{"role": "user", "content": "hi there"}, {"role": "assistant", "content": "hello!"}]

    def documents():
        from trainer.data import assistant_segments

        yield assistant_segments(render_chat)(chat)

    stream = StreamBatches(documents, ByteTokenizer(), seq_len=8, batch_size=3, world_size=1,
                           masked=True)  # fmt: skip
    _, targets = next(stream)
    assert (targets == IGNORE_INDEX).any() and (targets != IGNORE_INDEX).any()
    next(stream)  # the one document gives fewer windows than asked: it starts over
    assert stream.epoch >= 1


def test_stream_too_small_is_a_config_error():
    stream = StreamBatches(lambda: iter(["tiny"]), ByteTokenizer(), seq_len=64, batch_size=1,
                           world_size=1)  # fmt: skip
    with pytest.raises(ConfigError, match="dataset too small"):
        next(stream)


def test_hub_dataset_without_the_datasets_package_explains_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` -> ImportError
    with pytest.raises(ConfigError, match=r"pip install 'fsdp-eks\[trainer\]'"):
        next(hub_documents("some-org/some-dataset", "default", render_chat, 0, 1))


# --- a job: 2 ranks on one node ---------------------------------------------------------


def two_ranks(args: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess, list]:
    """2 ranks on one node as torchrun starts them (LOCAL_RANK 0 and 1), forked (launch)."""
    proc = launch(args, 2, env=env)
    return proc, parse_lines(proc.stdout)


def test_two_ranks_download_once_train_on_the_stream_and_resume(stand_in, tmp_path):
    env = {**trainer_env(), "OMP_NUM_THREADS": "1"}  # HF_* from the fixture's monkeypatch
    args = ["--model_name_or_path", "stand/tiny-llama", "--tokenizer", "stand/tiny-llama",
            "--dataset", "stand/tiny-c4", "--dataset_config_name", "en", "--seq_len", "32",
            "--train_batch_size", "2", "--log_freq", "1", "--validation_freq", "0",
            "--checkpoint_dir", str(tmp_path / "ckpt"), "--checkpoint_freq", "3"]  # fmt: skip
    proc, events = two_ranks([*args, "--max_steps", "3"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = events[-1]
    assert summary["event"] == "summary" and summary["steps"] == 3
    assert summary["model"] == "stand/tiny-llama"
    # Once per node: one GET of each model file for both ranks (model and tokenizer).
    for name in ("model.safetensors", "config.json", "tokenizer.json"):
        assert stand_in.file_gets("stand/tiny-llama", name) == 1, name
    served = stand_in.bytes_served("stand/tiny-c4", "en/")
    assert 0 < served <= 4 * dataset_bytes(stand_in.repos["stand/tiny-c4"].files) / SHARDS

    proc, events = two_ranks([*args, "--max_steps", "5"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert events[-1]["resumed_from"] and events[-1]["steps"] == 5
    steps = [e["step"] for e in events if e["event"] == "step"]
    assert steps == [4, 5]
    # The resumed job reads the node's copy: the model is not fetched again.
    assert stand_in.file_gets("stand/tiny-llama", "model.safetensors") == 1


def test_two_ranks_refuse_the_position_of_another_datasets_stream(stand_in, tmp_path):
    env = {**trainer_env(), "OMP_NUM_THREADS": "1"}
    args = ["--model_name_or_path", "stand/tiny-llama", "--tokenizer", "stand/tiny-llama",
            "--dataset_config_name", "en", "--seq_len", "32", "--train_batch_size", "2",
            "--log_freq", "1", "--validation_freq", "0", "--checkpoint_freq", "2",
            "--checkpoint_dir", str(tmp_path / "ckpt")]  # fmt: skip
    proc, _ = two_ranks([*args, "--dataset", "stand/tiny-c4", "--max_steps", "2"], env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # The same checkpoint_dir (a reused job name), another dataset: refused, said plainly,
    # before a byte of the new stream is read (it would be re-read to skip the old count).
    proc, events = two_ranks([*args, "--dataset", "stand/other-c4", "--max_steps", "4"], env)
    assert proc.returncode != 0
    said = proc.stdout + proc.stderr
    assert "another stream (dataset 'stand/tiny-c4' -> 'stand/other-c4')" in said, said[-3000:]
    assert "use a new --checkpoint_dir" in said
    assert not [e for e in events if e.get("event") == "step"]
    assert stand_in.bytes_served("stand/other-c4") == 0
