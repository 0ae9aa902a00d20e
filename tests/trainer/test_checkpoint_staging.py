"""How checkpoints are staged for an async save: pinned shared memory for a GPU's
writer process, and that writer process, on CPU.

Issue 23's S3 staging race (2 ranks resuming from S3 without --output_dir) is
test_trainer_e2e's test_resume_from_s3_without_output_dir_stages_once_per_host: it
shares the two S3 jobs of the S3 round trip there."""

from __future__ import annotations

import pytest
import torch
from torch.distributed.checkpoint.staging import StagingOptions

from trainer.checkpoint import FencedStager, fence_staging


class Stream:
    """A stand-in for a device stream: records what is asked of it, in order."""

    def __init__(self, name: str, log: list[tuple[str, ...]]) -> None:
        self.name, self.log = name, log

    def wait_stream(self, other: Stream) -> None:
        self.log.append((self.name, "waits for", other.name))

    def synchronize(self) -> None:
        self.log.append(("host", "waits for", self.name))


class CopyProbe:
    """A state-dict entry that records when the stager copies it."""

    def __init__(self, log: list[tuple[str, ...]]) -> None:
        self.log = log

    def __deepcopy__(self, memo: dict) -> CopyProbe:
        self.log.append(("stager", "copies"))
        return CopyProbe(self.log)


@pytest.mark.parametrize(
    ("streams", "how", "expected"),
    [
        # A GPU: the staging stream waits for the loop's stream, on the device.
        (("staging", "compute"), "stream", [("staging", "waits for", "compute")]),
        # No staging stream to order (a torch that renamed it): the host waits.
        ((None, "compute"), "host", [("host", "waits for", "compute")]),
        # CPU: the optimizer's writes are done when its step returns.
        ((None, None), "none", []),
    ],
)
def test_an_async_saves_copy_waits_for_the_optimizer_step_queued_before_it(streams, how, expected):
    log: list[tuple[str, ...]] = []
    staging, compute = (Stream(name, log) if name else None for name in streams)
    assert fence_staging(staging, compute) == how
    assert log == expected


def test_the_stager_fences_before_it_copies_and_stages_the_values_of_that_moment():
    log: list[tuple[str, ...]] = []
    compute = Stream("compute", log)
    # The GPU plan's background copy, on CPU (pinned memory and non-blocking copies
    # need CUDA): without a staging stream the fence is the host's wait.
    options = StagingOptions(
        use_pinned_memory=False, use_shared_memory=True, use_async_staging=True,
        use_non_blocking_copy=False,
    )  # fmt: skip
    stager = FencedStager(options, compute=lambda: compute)
    try:
        weights = torch.arange(6.0)
        staged = stager.stage({"w": weights, "probe": CopyProbe(log)}).result()
        weights += 1  # the next step: the staged copy keeps what was there
        assert log == [("host", "waits for", "compute"), ("stager", "copies")]
        assert torch.equal(staged["w"], torch.arange(6.0))
    finally:
        stager.close()


def test_each_staging_mode_copies_and_writes_as_its_memory_allows():
    from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

    from trainer.checkpoint import staging_plan

    shared = staging_plan("shared")  # /dev/shm holds it: a writer process reads it there
    assert shared.writer == AsyncCheckpointerType.PROCESS
    assert shared.options is not None
    assert shared.options.use_pinned_memory and shared.options.use_shared_memory
    assert shared.options.use_async_staging and shared.options.use_non_blocking_copy
    pinned = staging_plan("pinned")  # pinned host memory, not shared: a writer thread
    assert pinned.writer == AsyncCheckpointerType.THREAD
    assert pinned.options is not None
    assert pinned.options.use_pinned_memory and not pinned.options.use_shared_memory
    cpu = staging_plan("host")  # pinned memory needs CUDA; the state is host memory already
    assert cpu.options is None and cpu.writer == AsyncCheckpointerType.THREAD


GIB = 2**30


@pytest.mark.parametrize(
    ("device", "asked", "need", "shm", "host", "mode"),
    [
        # A GPU, async_save unset: on when the node holds the staged copy.
        ("cuda", None, 90 * GIB, 160 * GIB, 1800 * GIB, "shared"),
        # /dev/shm too small (the old 8 GiB per process): pinned memory outside it.
        ("cuda", None, 90 * GIB, 64 * GIB, 1800 * GIB, "pinned"),
        # Neither holds it: synchronous saves, said; asked for: refused with the numbers.
        ("cuda", None, 90 * GIB, 64 * GIB, 80 * GIB, "off"),
        ("cuda", True, 90 * GIB, 64 * GIB, 80 * GIB, "refused"),
        ("cuda", False, 1 * GIB, 160 * GIB, 1800 * GIB, "off"),
        # CPU: off unless asked for (its saves are a copy of host memory).
        ("cpu", None, 1 * GIB, 160 * GIB, 1800 * GIB, "off"),
        ("cpu", True, 1 * GIB, 0, 0, "host"),
    ],
)
def test_async_saves_are_on_for_gpus_where_the_node_holds_the_staged_copy(
    device, asked, need, shm, host, mode
):
    from trainer.checkpoint import choose_staging

    chosen, why = choose_staging(device, asked, need, shm, host)
    assert chosen == mode
    if mode in ("pinned", "refused"):
        assert "90.0 GiB staged per node; /dev/shm has 64.0 GiB free" in why


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


def _train_save_resume(rank: int, store: str, root: str) -> None:
    import os
    from pathlib import Path

    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )
    from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
    from torch.distributed.fsdp import MixedPrecisionPolicy

    from trainer.checkpoint import Checkpointer, StagingPlan
    from trainer.config import CheckpointConfig, ModelConfig
    from trainer.model import Transformer
    from trainer.parallel import apply_fsdp, build_mesh

    os.environ["MASTER_ADDR"] = "127.0.0.1"  # where the writers' own group meets
    dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=rank, world_size=2)
    cfg = ModelConfig(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=61, max_seq_len=16)
    tokens = torch.randint(0, 61, (2, 16), generator=torch.Generator().manual_seed(rank))

    def build(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(seed)
        model = apply_fsdp(Transformer(cfg), build_mesh("cpu", "full", 2, 2),
                           MixedPrecisionPolicy(), True)  # fmt: skip
        return model, torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)

    def step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        model(tokens, tokens).backward()
        optimizer.step()
        optimizer.zero_grad()

    def local_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> list:
        params = [p.to_local().clone() for p in model.parameters()]  # type: ignore[attr-defined]
        moments = [optimizer.state[p][k].to_local().clone()
                   for p in model.parameters() for k in ("exp_avg", "exp_avg_sq")]  # fmt: skip
        return params + moments

    try:
        model, optimizer = build(0)
        step(model, optimizer)
        step(model, optimizer)
        # The GPU plan's staging (a background copy into shared memory, a writer
        # process), on CPU.
        options = StagingOptions(use_pinned_memory=False, use_shared_memory=True,
                                 use_async_staging=True, use_non_blocking_copy=False)  # fmt: skip
        plan = StagingPlan(options, AsyncCheckpointerType.PROCESS)
        ckpt_cfg = CheckpointConfig(checkpoint_dir=root, async_save=True)
        ckpt = Checkpointer(ckpt_cfg, rank, lambda *a, **k: None, {}, [], Path(root), plan)
        saved = local_state(model, optimizer)
        state = {"model": get_model_state_dict(model),
                 "optim": get_optimizer_state_dict(model, optimizer)}  # fmt: skip
        ckpt.save(2, state)
        ckpt.wait_staged()
        step(model, optimizer)  # the next step runs while the write goes on
        ckpt.finalize(wait=True)
        ckpt.close()

        resumed, resumed_optimizer = build(1)
        step(resumed, resumed_optimizer)  # moments to load into
        state = {"model": get_model_state_dict(resumed),
                 "optim": get_optimizer_state_dict(resumed, resumed_optimizer)}  # fmt: skip
        loader = Checkpointer(ckpt_cfg, rank, lambda *a, **k: None, {}, [], Path(root))
        loader.load(Path(root) / "step-2", state)
        set_model_state_dict(resumed, state["model"])
        set_optimizer_state_dict(resumed, resumed_optimizer, state["optim"])
        loader.close()
        for got, want in zip(local_state(resumed, resumed_optimizer), saved, strict=True):
            assert torch.equal(got, want)
    finally:
        dist.destroy_process_group()


def test_an_async_save_resumes_to_the_same_parameters_and_adam_moments(tmp_path):
    from tests.trainer.conftest import spawn

    spawn(_train_save_resume, (str(tmp_path / "store"), str(tmp_path / "ckpt")), 2)


@pytest.mark.parametrize(("asked", "mode"), [([], "off"), (["--async_save", "true"], "host")])
def test_a_run_says_how_its_saves_stage_once_at_its_first_save(
    tmp_path, capsys, no_dist_env, asked, mode
):
    from tests.trainer.conftest import train_here

    args = ["--max_steps", "2", "--checkpoint_freq", "1", "--validation_freq", "0",
            "--checkpoint_dir", str(tmp_path / "ckpt"), *asked]  # fmt: skip
    code, events = train_here(capsys, args)
    assert code == 0, events[-1]
    staging = [e for e in events if e["event"] == "checkpoint_staging"]
    assert [e["mode"] for e in staging] == [mode]  # CPU: async only when asked
    assert staging[0]["staged_gib_per_node"] >= 0
    saved = [e for e in events if e["event"] == "checkpoint_saved"]
    # The last save is synchronous whatever the mode: the process exits after it.
    assert [e["async_save"] for e in saved] == [mode == "host", False]


def test_the_node_memory_a_staging_decision_reads(tmp_path):
    from trainer.node_memory import available_bytes, shm_free_bytes

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:  2097152 kB\nMemAvailable:  1048576 kB\n")
    assert available_bytes(str(meminfo)) == 2**30
    assert available_bytes(str(tmp_path / "none")) == 0
    assert shm_free_bytes(str(tmp_path / "none")) == 0  # no /dev/shm: nothing to stage in
    assert shm_free_bytes(str(tmp_path)) > 0
