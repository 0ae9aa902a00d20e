"""Issue 23's S3 staging race, examined.

The race as filed: rank 0 deletes a local staging directory that another rank of its
host may still be copying into before the barrier. It cannot happen: only a host's
local rank 0 fetches, copies and renames (Checkpointer._download), the others wait at
the barrier after it, and nothing else writes there.

What the test below found instead: without --output_dir (the Kubernetes target passes
none) every rank staged under its own `mkdtemp`, so on resume local rank 0 downloaded
into its directory and rank 1 loaded from an empty one. The staging root is now one
per host, agreed among the ranks of the host."""

from __future__ import annotations

import uuid

import pytest

from tests.trainer.test_checkpoint_resume import of, torchrun
from tests.trainer.test_trainer_e2e import SMALL, run


@pytest.mark.integration
def test_resume_from_s3_without_output_dir_stages_once_per_host(moto_server, tmp_path):
    import boto3

    bucket = f"stage-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=bucket)
    env = {**moto_server.env, "FSDP_EKS_CACHE_DIR": str(tmp_path / "cache")}
    args = [*SMALL, "--checkpoint_dir", f"s3://{bucket}/ckpt", "--checkpoint_freq", "0"]
    # Step 2 saves asynchronously: each rank's upload runs off the loop, the marker
    # follows at a later step once every rank said its upload is done.
    first = [*args, "--max_steps", "4", "--checkpoint_freq", "2", "--async_save", "true"]
    code, events, err = run(torchrun(2, first), env)
    assert code == 0, err[-3000:]
    saved = {e["step"]: e for e in events if e["event"] == "checkpoint_saved"}
    assert saved[2]["async_save"] is True and saved[4]["async_save"] is False
    keys = {o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket=bucket)["Contents"]}
    assert {"ckpt/step-4/COMPLETE", "ckpt/step-4/__1_0.distcp"} <= keys
    code, resumed, err = run(torchrun(2, [*args, "--max_steps", "6"]), env)
    assert code == 0, err[-3000:]
    assert of(resumed, "checkpoint_loaded")[0]["step"] == 4
    assert of(resumed, "summary")[0]["steps"] == 6


def test_gpu_checkpoints_stage_into_pinned_shared_memory_for_a_writer_process():
    from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

    from trainer.checkpoint import staging_plan

    gpu = staging_plan("cuda")
    assert gpu.writer == AsyncCheckpointerType.PROCESS
    assert gpu.options is not None
    assert gpu.options.use_pinned_memory and gpu.options.use_shared_memory
    assert gpu.options.use_async_staging and gpu.options.use_non_blocking_copy
    cpu = staging_plan("cpu")  # pinned memory needs CUDA; the state is host memory already
    assert cpu.options is None and cpu.writer == AsyncCheckpointerType.THREAD


def _process_writer(rank: int, store: str, root: str) -> None:
    import os
    from pathlib import Path

    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

    from trainer.checkpoint import Checkpointer, StagingPlan
    from trainer.checkpoint_layout import is_complete
    from trainer.config import CheckpointConfig

    os.environ["MASTER_ADDR"] = "127.0.0.1"  # where the writers' own group meets
    dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=rank, world_size=2)
    try:
        cfg = CheckpointConfig(checkpoint_dir=root, async_save=True)
        plan = StagingPlan(None, AsyncCheckpointerType.PROCESS)
        ckpt = Checkpointer(cfg, rank, lambda *a, **k: None, {}, [], Path(root), plan)
        weights = torch.arange(10.0) + rank
        ckpt.save(1, {"rank": {str(rank): weights}})
        ckpt.wait_staged()
        weights += 100  # the next optimizer step: the checkpoint keeps what was saved
        ckpt.finalize(wait=True)
        ckpt.close()
        # Rank 0 marks the step complete in its finalize; the other rank reads the mark
        # only after it (checking at once raced rank 0's write on a loaded machine).
        dist.barrier()
        assert is_complete(Path(root) / "step-1")
        back = {"rank": {str(rank): torch.zeros(10)}}
        dcp.load(back, checkpoint_id=str(Path(root) / "step-1"))
        assert torch.equal(back["rank"][str(rank)], torch.arange(10.0) + rank)
    finally:
        dist.destroy_process_group()


def test_an_async_save_through_a_writer_process_is_complete_and_loads(tmp_path):
    # The GPU path's writer, on CPU (without pinned memory, which needs CUDA).
    import torch.multiprocessing as mp

    root = tmp_path / "ckpt"
    mp.spawn(_process_writer, args=(str(tmp_path / "store"), str(root)), nprocs=2, join=True)
