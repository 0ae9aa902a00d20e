"""Damaged checkpoints: verified before they are trusted, skipped for the one before,
and a run whose every checkpoint is damaged stops with one ConfigError line.

The checkpoints are real: one 2-process run writes steps 1-3 (a shard per rank), and
each test damages a copy of them as a disk, a person or an interrupted copy would.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException

from trainer import train as train_mod
from trainer.checkpoint_layout import CONFIG_FILE, MARKER, step_dirs, step_of, verify_checkpoint
from trainer.config import ConfigError

# Tiny and few steps: the 'debug' preset, 64-token windows, a checkpoint every step.
BASE = ["--model_type", "debug", "--seq_len", "64", "--train_batch_size", "4"]
BASE += ["--log_freq", "1", "--validation_freq", "0", "--warmup_steps", "1"]
BASE += ["--checkpoint_freq", "1"]
TOL = 2e-4  # same math, maybe another summation order


def of(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["event"] == kind]


@pytest.fixture(scope="module")
def saved(tmp_path_factory, run_trainer) -> tuple[list[dict], Path]:
    """Steps 1, 2 and 3 of one 2-process run, all kept."""
    ckpt = tmp_path_factory.mktemp("saved")
    args = [*BASE, "--max_steps", "3", "--checkpoint_dir", str(ckpt), "--keep_last", "0"]
    proc, events = run_trainer(args, nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [step_of(d) for d in step_dirs(ckpt)] == [1, 2, 3]
    return events, ckpt


@pytest.fixture
def ckpt(saved, tmp_path) -> Path:
    """A copy of the saved checkpoints this test may damage."""
    copy = tmp_path / "ckpt"
    shutil.copytree(saved[1], copy)
    return copy


def run_in_process(capsys, args: list[str]) -> tuple[int, list[dict], str]:
    code = train_mod.main(args)
    out, err = capsys.readouterr()
    return code, [json.loads(line) for line in out.splitlines()], err


# --- verify_checkpoint ------------------------------------------------------------


def _delete_shard(step: Path) -> None:
    (step / "__1_0.distcp").unlink()


def _truncate_shard(step: Path) -> None:
    shard = step / "__0_0.distcp"
    with shard.open("r+b") as f:
        f.truncate(shard.stat().st_size - 1)  # the last byte is enough


def _delete_metadata(step: Path) -> None:
    (step / ".metadata").unlink()


def _garble_metadata(step: Path) -> None:
    meta = step / ".metadata"
    meta.write_bytes(meta.read_bytes()[:100])


def _delete_config(step: Path) -> None:
    (step / CONFIG_FILE).unlink()


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (_delete_shard, "shard __1_0.distcp missing"),
        (_truncate_shard, "shard __0_0.distcp truncated ("),
        (_delete_metadata, ".metadata missing"),
        (_garble_metadata, ".metadata unreadable ("),
        (_delete_config, f"{CONFIG_FILE} missing"),
    ],
    ids=["deleted-shard", "truncated-shard", "no-metadata", "garbled-metadata", "no-config"],
)
def test_verify_names_what_is_damaged(ckpt, damage, problem):
    step = ckpt / "step-3"
    assert verify_checkpoint(step) is None
    damage(step)
    found = verify_checkpoint(step)
    assert found is not None and found.startswith(problem), found
    assert verify_checkpoint(ckpt / "step-2") is None  # its neighbours are untouched


def test_verify_reports_a_truncated_shard_with_its_sizes(ckpt):
    shard = ckpt / "step-3" / "__0_0.distcp"
    size = shard.stat().st_size
    with shard.open("r+b") as f:
        f.truncate(size // 2)
    assert verify_checkpoint(shard.parent) == (
        f"shard __0_0.distcp truncated ({size // 2} of {size} bytes)"
    )


# --- the trainer on damaged checkpoints -------------------------------------------


def test_a_damaged_newest_checkpoint_is_skipped_for_the_one_before(saved, ckpt, run_trainer):
    reference = {e["step"]: e["loss"] for e in of(saved[0], "step")}
    _delete_shard(ckpt / "step-3")  # rank 1's shard; COMPLETE stays
    assert (ckpt / "step-3" / MARKER).is_file()
    proc, events = run_trainer([*BASE, "--max_steps", "4", "--checkpoint_dir", str(ckpt)], nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (skipped,) = of(events, "checkpoint_skipped")
    assert skipped == {
        "event": "checkpoint_skipped",
        "path": str(ckpt / "step-3"),
        "reason": "damaged: shard __1_0.distcp missing",
    }
    (loaded,) = of(events, "checkpoint_loaded")
    assert loaded["step"] == 2 and of(events, "start")[0]["resumed_from"] == 2
    # Really step 2's state: step 3 again gives the loss the first run had.
    step3 = next(e for e in of(events, "step") if e["step"] == 3)
    assert step3["loss"] == pytest.approx(reference[3], abs=TOL)
    assert verify_checkpoint(ckpt / "step-3") is None  # rewritten by the new run


@pytest.mark.integration
def test_a_damaged_newest_s3_checkpoint_is_skipped_for_the_one_before(
    saved, moto_server, tmp_path, monkeypatch, capsys, no_dist_env
):
    import boto3

    monkeypatch.setenv("FSDP_EKS_CACHE_DIR", str(tmp_path / "cache"))
    s3, bucket = boto3.client("s3"), f"ckpt-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    for path in sorted(p for p in saved[1].rglob("*") if p.is_file()):
        s3.upload_file(str(path), bucket, f"run/{path.relative_to(saved[1]).as_posix()}")
    s3.delete_object(Bucket=bucket, Key="run/step-3/__1_0.distcp")  # COMPLETE stays
    uri = f"s3://{bucket}/run"
    # One process with twice the batch: the same global batch as the 2-process run.
    args = [*BASE, "--max_steps", "4", "--checkpoint_dir", uri, "--train_batch_size", "8"]
    code, events, _ = run_in_process(capsys, [*args, "--output_dir", str(tmp_path / "out")])
    assert code == 0
    (skipped,) = of(events, "checkpoint_skipped")
    assert skipped["path"] == f"{uri}/step-3"
    assert skipped["reason"] == "damaged: shard __1_0.distcp missing"
    assert of(events, "checkpoint_loaded")[0]["step"] == 2
    reference = {e["step"]: e["loss"] for e in of(saved[0], "step")}
    step3 = next(e for e in of(events, "step") if e["step"] == 3)
    assert step3["loss"] == pytest.approx(reference[3], abs=TOL)
    assert of(events, "summary")[0]["checkpoint"] == f"{uri}/step-4"


def test_every_checkpoint_damaged_stops_with_one_config_error_line(ckpt, capsys, no_dist_env):
    for step in step_dirs(ckpt):
        _delete_shard(step)
    code, events, _ = run_in_process(
        capsys, [*BASE, "--max_steps", "5", "--checkpoint_dir", str(ckpt)]
    )
    assert code == train_mod.EXIT_CONFIG
    assert [e["path"] for e in of(events, "checkpoint_skipped")] == [
        str(ckpt / f"step-{n}") for n in (3, 2, 1)
    ]
    assert not of(events, "start")  # no fresh start over the damaged run
    (error,) = of(events, "error")
    assert error["error_type"] == "ConfigError" and error["retryable"] is False
    message = error["message"]
    assert "\n" not in message and len(message) <= train_mod.MESSAGE_LIMIT
    assert message.startswith(f"checkpoint_dir {ckpt}: every complete checkpoint is damaged")
    assert "(step-3: shard __1_0.distcp missing; 2 older ones too)" in message
    assert "move it aside or delete the damaged step directories" in message
    assert [step_of(d) for d in step_dirs(ckpt)] == [1, 2, 3]  # nothing deleted


def _killed_in_its_first_save(ckpt: Path) -> None:
    """What a job killed while writing its first checkpoint leaves: step-1 without its
    COMPLETE marker, a shard cut short, and nothing older."""
    for step in ("step-2", "step-3"):
        shutil.rmtree(ckpt / step)
    (ckpt / "step-1" / MARKER).unlink()
    _truncate_shard(ckpt / "step-1")


def test_a_job_killed_during_its_first_save_reruns_fresh(saved, ckpt, capsys, no_dist_env):
    _killed_in_its_first_save(ckpt)
    code, events, _ = run_in_process(
        capsys,
        [*BASE, "--max_steps", "1", "--checkpoint_dir", str(ckpt), "--train_batch_size", "8"],
    )
    assert code == 0, of(events, "error")
    assert of(events, "checkpoint_skipped") == [
        {
            "event": "checkpoint_skipped",
            "path": str(ckpt / "step-1"),
            "reason": "no COMPLETE marker",
        }
    ]
    assert not of(events, "checkpoint_loaded") and not of(events, "error")
    assert not of(events, "start")[0].get("resumed_from")
    reference = {e["step"]: e["loss"] for e in of(saved[0], "step")}
    assert of(events, "step")[0]["loss"] == pytest.approx(reference[1], abs=TOL)  # fresh
    assert verify_checkpoint(ckpt / "step-1") is None and (ckpt / "step-1" / MARKER).is_file()


@pytest.mark.integration
def test_an_s3_job_killed_during_its_first_save_reruns_fresh(
    saved, ckpt, moto_server, tmp_path, monkeypatch, capsys, no_dist_env
):
    import boto3

    monkeypatch.setenv("FSDP_EKS_CACHE_DIR", str(tmp_path / "cache"))
    _killed_in_its_first_save(ckpt)
    s3, bucket = boto3.client("s3"), f"ckpt-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    for path in sorted(p for p in ckpt.rglob("*") if p.is_file()):
        s3.upload_file(str(path), bucket, f"run/{path.relative_to(ckpt).as_posix()}")
    uri = f"s3://{bucket}/run"
    args = [*BASE, "--max_steps", "1", "--checkpoint_dir", uri, "--train_batch_size", "8"]
    code, events, _ = run_in_process(capsys, [*args, "--output_dir", str(tmp_path / "out")])
    assert code == 0, of(events, "error")
    assert [(e["path"], e["reason"]) for e in of(events, "checkpoint_skipped")] == [
        (f"{uri}/step-1", "no COMPLETE marker")
    ]
    assert not of(events, "checkpoint_loaded")
    assert of(events, "summary")[0]["checkpoint"] == f"{uri}/step-1"


def test_a_load_that_fails_anyway_is_one_config_error_line(ckpt, capsys, no_dist_env):
    # Garbage over the start of a shard: every size is right, so verification passes
    # and only the load finds out.
    shard = ckpt / "step-3" / "__0_0.distcp"
    with shard.open("r+b") as f:
        f.write(b"\xff" * 4096)
    assert verify_checkpoint(shard.parent) is None
    code, events, stderr = run_in_process(
        capsys, [*BASE, "--max_steps", "4", "--checkpoint_dir", str(ckpt)]
    )
    assert code == train_mod.EXIT_CONFIG
    (error,) = of(events, "error")
    assert error["error_type"] == "ConfigError" and error["retryable"] is False
    message = error["message"]
    assert "\n" not in message and len(message) <= train_mod.MESSAGE_LIMIT
    assert message.startswith(f"cannot load checkpoint {shard.parent}; if it is damaged")
    assert "(rank 0: " in message
    assert "CheckpointException" in stderr  # the whole story is in the log


def test_a_newer_damaged_checkpoint_does_not_count_towards_keep_last(ckpt, capsys, no_dist_env):
    # Steps 3 and 2 damaged: the run resumes from 1 and saves 2 again. With keep_last
    # 1, the damaged step 3 must not count as the newest, or the new step 2 would go.
    _delete_shard(ckpt / "step-3")
    _delete_shard(ckpt / "step-2")
    args = [*BASE, "--max_steps", "2", "--checkpoint_dir", str(ckpt), "--keep_last", "1"]
    code, events, _ = run_in_process(capsys, args)
    assert code == 0
    assert of(events, "checkpoint_loaded")[0]["step"] == 1
    assert [step_of(d) for d in step_dirs(ckpt)] == [2, 3]
    assert verify_checkpoint(ckpt / "step-2") is None


# --- the error line ---------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")  # a load in one process
def test_error_fields_are_one_bounded_line_with_retryable(ckpt):
    long = RuntimeError("x" * 1000 + "\nsecond line")
    fields = train_mod.error_fields(long)
    assert fields["retryable"] is True and fields["error_type"] == "RuntimeError"
    assert len(fields["message"]) == train_mod.MESSAGE_LIMIT and fields["message"][-1] == "…"
    assert train_mod.error_fields(ConfigError("bad\nflag")) == {
        "error_type": "ConfigError",
        "message": "bad",
        "retryable": False,
    }
    # A real DCP failure: its str is a traceback, the line says what happened.
    for shard in (ckpt / "step-3").glob("*.distcp"):
        shard.unlink()
    with pytest.raises(CheckpointException) as info:
        dcp.load({"train": {"step": 0}}, checkpoint_id=str(ckpt / "step-3"))
    assert "Traceback" in str(info.value)
    fields = train_mod.error_fields(info.value)
    assert fields["message"].startswith("rank 0: FileNotFoundError: ")
    assert "\n" not in fields["message"] and fields["retryable"] is True
