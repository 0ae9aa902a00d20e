"""Issue 30 items 7, 8 and 15: the trainer's files through its own bounded, no-link
opener (trainer/safe_files.py) and the token cache's lock, build ids and header.

7: two jobs build the same token cache at once: one builds, the other waits and uses
   it (no double build, no FileNotFoundError, no part file left).
8: a FIFO or a link to /dev/zero as the dataset is refused at open (no endless read).
15: a damaged token cache (odd size, cut short, cut in half, bytes changed, a link or a
    FIFO in its place) is found by its header and hash, named in the log and rebuilt;
    a rank that opens one gets an error naming the file."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.trainer.conftest import fork_server, launch, parse_lines
from trainer.config import ConfigError
from trainer.data import load_documents
from trainer.token_cache import cached_tokens, open_tokens, token_file
from trainer.tokenizer import ByteTokenizer

pytestmark = pytest.mark.integration


def write_dataset(path: Path, docs: int) -> str:
    rows = [
        {"text": f"document {i}: " + "words and more words " * (i % 7 + 1)} for i in range(docs)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture
def dataset(tmp_path: Path) -> str:
    return write_dataset(tmp_path / "data.jsonl", 60)


def built(dataset: str, root: Path) -> tuple[Path, np.ndarray]:
    tok = ByteTokenizer()
    path = token_file(dataset, None, tok, None, root=root)
    tokens = cached_tokens(path, lambda: load_documents(dataset), tok, 0, 1, lambda: None)
    return path, np.array(tokens)


# --- item 15: a damaged cache is found, named and rebuilt -----------------------------------


def _odd_size(path: Path) -> None:
    with open(path, "ab") as out:
        out.write(b"\1")


def _truncate(fraction: float):
    def cut(path: Path) -> None:
        os.truncate(path, int(path.stat().st_size * fraction))

    return cut


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))


def _link_elsewhere(path: Path) -> None:
    other = path.with_name("elsewhere")
    other.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    path.unlink()
    path.symlink_to(other)


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


DAMAGE = {
    "odd size": _odd_size,
    "cut to a few bytes": lambda p: os.truncate(p, 10),
    "cut in half": _truncate(0.5),
    "one byte changed": _flip_a_byte,
    "a link in its place": _link_elsewhere,
    "a FIFO in its place": _fifo,
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_token_cache_is_named_and_rebuilt(dataset, tmp_path, capfd, damage):
    path, first = built(dataset, tmp_path / "cache")
    DAMAGE[damage](path)
    reads: list[int] = []

    def read_documents():
        reads.append(1)
        return load_documents(dataset)

    again = cached_tokens(path, read_documents, ByteTokenizer(), 0, 1, lambda: None)
    assert reads == [1], "the damaged cache was used instead of being rebuilt"
    assert np.array_equal(np.array(again), first)
    assert str(path) in capfd.readouterr().err  # the log names the file it rebuilt
    assert not path.is_symlink()  # a link in its place was replaced, never followed
    if damage == "a link in its place":
        assert path.with_name("elsewhere").stat().st_size > 0  # its target untouched


def test_a_rank_that_opens_a_damaged_cache_is_told_which_file(dataset, tmp_path):
    path, _ = built(dataset, tmp_path / "cache")
    _truncate(0.5)(path)
    with pytest.raises(Exception) as caught:
        open_tokens(path)
    assert str(path) in str(caught.value) and "cut" in str(caught.value)


# --- item 7: two jobs building the same cache at once --------------------------------------


def _job_rank(dataset: str, root: str, start: Any, barrier: Any, rank: int, reads: str) -> None:
    """One local rank of one job: wait for the common start, then cached_tokens."""
    tok = ByteTokenizer()
    path = token_file(dataset, None, tok, None, root=Path(root))

    def read_documents():
        with open(reads, "a") as out:
            out.write(f"{os.getpid()}\n")
        return load_documents(dataset)

    start.wait()
    tokens = cached_tokens(path, read_documents, tok, rank, 2, barrier.wait)
    np.save(f"{reads}.{os.getpid()}.npy", np.array(tokens))


def test_two_jobs_building_one_cache_at_once_build_it_once(tmp_path):
    # Big enough that one build takes a while (the race window), small enough for CI.
    dataset = write_dataset(tmp_path / "big.jsonl", 40_000)
    # Forked from a server that imported torch once (each spawned python imported it:
    # ~2.6 CPU-s a rank); the ranks need nothing of this process's environment.
    ctx = fork_server()
    start = ctx.Barrier(4)
    jobs = [ctx.Barrier(2), ctx.Barrier(2)]  # each job's own collective barrier
    reads = tmp_path / "reads"
    ranks = [
        ctx.Process(
            target=_job_rank,
            args=(dataset, str(tmp_path / "cache"), start, jobs[j], rank, str(reads)),
        )  # fmt: skip
        for j in (0, 1)
        for rank in (0, 1)
    ]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(240)
    assert [p.exitcode for p in ranks] == [0, 0, 0, 0]
    assert len(reads.read_text().split()) == 2, "the dataset was tokenized by both jobs"
    results = [np.load(f) for f in tmp_path.glob("reads.*.npy")]
    assert len(results) == 4 and all(np.array_equal(r, results[0]) for r in results)
    left = sorted(p.name for p in (tmp_path / "cache" / "tokens").iterdir())
    assert not [n for n in left if ".part" in n or ".tmp" in n], left


# --- item 8: a FIFO or a device as the dataset -----------------------------------------------


def _answer(call, seconds: float = 10.0) -> Any:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 (handed to the test)
            box["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the dataset was read for ever"
    if "error" in box:
        raise box["error"]
    return box["value"]


@pytest.mark.parametrize("kind", ["fifo.txt", "fifo.jsonl", "zero.txt", "zero.jsonl"])
def test_a_fifo_or_device_dataset_is_refused_at_open(tmp_path, kind):
    path = tmp_path / kind
    if kind.startswith("fifo"):
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    with pytest.raises(ConfigError) as caught:
        _answer(lambda: load_documents(str(path)))
    assert str(path) in str(caught.value) and "not a regular file" in str(caught.value)


def test_the_trainer_ends_with_a_config_error_on_a_fifo_dataset(tmp_path, monkeypatch):
    """The reproduction: the trainer read a FIFO dataset for ever (SIGTERM did not end it)."""
    fifo = tmp_path / "data.txt"
    os.mkfifo(fifo)
    monkeypatch.setenv("FSDP_EKS_CACHE_DIR", str(tmp_path / "cache"))
    # One rank forked from the fork server (no python importing torch again); its
    # deadline still kills a run that reads the FIFO for ever, failing the test.
    proc = launch(
        ["--dataset", str(fifo), "--max_steps", "1", "--output_dir", str(tmp_path / "out")],
        1,
        timeout=180,
    )
    events = parse_lines(proc.stdout)
    assert proc.returncode != 0
    (error,) = [e for e in events if e["event"] == "error"]
    assert error["retryable"] is False and "FIFO" in error["message"], error
