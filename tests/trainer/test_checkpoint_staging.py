"""How checkpoints are staged for an async save: pinned shared memory for a GPU's
writer process, and that writer process, on CPU.

Issue 23's S3 staging race (2 ranks resuming from S3 without --output_dir) is
test_trainer_e2e's test_resume_from_s3_without_output_dir_stages_once_per_host: it
shares the two S3 jobs of the S3 round trip there."""

from __future__ import annotations


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
    from tests.trainer.conftest import spawn

    root = tmp_path / "ckpt"
    spawn(_process_writer, (str(tmp_path / "store"), str(root)), 2)
