"""Distributed checkpoints (torch.distributed.checkpoint): save, finalize, resume.

Every rank writes its own shards; rank 0 (DCP's coordinator) writes the metadata only
after every rank reported its writes, so when rank 0's save has returned the data is
all on disk and rank 0 writes the COMPLETE marker (checkpoint_layout.py). A resumed
run loads the newest complete checkpoint; DCP reshards it to the current world size.

With async_save (by default on GPUs where the node holds the copy: choose_staging, at
the first save) the state is copied to host memory (staged) and written while training
goes on (staging_plan): on a GPU into pinned, shared memory by a background copy that
starts after the optimizer step queued before it (FencedStager) and overlaps the next
forward and backward (the loop waits for it only before the optimizer changes the
weights: `wait_staged()`), and written by a writer process, which holds no GIL the loop
needs (pinned memory and a writer thread where /dev/shm is too small); on CPU the copy
is synchronous and a thread writes. With
an s3:// checkpoint_dir each rank's upload of what it wrote follows in the background
too. Finalizing (marker, pruning) happens at a step where every rank agrees the write
(and upload) is done; the loop asks `pending_done()` and reduces the answers with the
step's other collective values.

An s3:// checkpoint_dir is staged in a local directory and uploaded after each save,
the marker last; resume downloads the newest complete one.

A complete checkpoint is verified before it is trusted (checkpoint_layout.py); a
damaged one is skipped for the one before. If every complete one is damaged the run
stops with a ConfigError rather than silently starting over.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType, AsyncSaveResponse
from torch.distributed.tensor import DTensor
from torch.utils._pytree import tree_leaves

from trainer import storage
from trainer.checkpoint_layout import (
    CONFIG_FILE,
    MARKER,
    TOKENIZER_DIR,
    is_complete,
    newest_intact,
    s3_steps,
    step_dir,
    step_dirs,
    step_of,
    verify_checkpoint,
)
from trainer.config import CheckpointConfig, ConfigError
from trainer.node_memory import available_bytes, shm_free_bytes


class CheckpointReadError(RuntimeError):
    """A checkpoint that verified could not be read for a reason that may pass on
    retry (an I/O error); a damaged one is a ConfigError instead."""


@dataclass
class _Pending:
    step: int
    path: Path
    future: Future | None  # None: a synchronous save, already written
    started: float
    blocked_s: float = 0.0  # how long save() held up the training loop
    staged: Future | None = None  # done once the state is copied off the weights
    uploaded: bool = False  # the future includes this rank's S3 upload


@dataclass(frozen=True)
class StagingPlan:
    """How an async checkpoint leaves the training loop."""

    options: StagingOptions | None  # None: DCP's own (a synchronous copy to the host)
    writer: AsyncCheckpointerType


def current_stream() -> Any:
    """The calling thread's stream on the accelerator (the loop's: where the optimizer
    step was queued), or None without one."""
    return torch.accelerator.current_stream() if torch.accelerator.is_available() else None


def fence_staging(staging: Any, compute: Any) -> str:
    """Order an async save's copies after the work queued on the `compute` stream so
    far: the optimizer step that wrote the parameters and Adam moments being saved.
    DCP's DefaultStager copies on a stream of its own that never waits for the compute
    stream, so a copy could read them while the fused AdamW was still writing them.
    Returns how the order is kept: "stream" (the staging stream waits on the compute
    stream, on the device: the host goes on), "host" (no staging stream to order: the
    host waits for the compute stream), "none" (no device: CPU tensors are written by
    the time the optimizer's step returns)."""
    if compute is None:
        return "none"
    if staging is None:
        compute.synchronize()
        return "host"
    staging.wait_stream(compute)
    return "stream"


class FencedStager(DefaultStager):
    """DCP's DefaultStager (pinned and shared buffers reused across saves, a background
    copy) whose copies start only after what the caller's stream holds when `stage` is
    called (fence_staging)."""

    def __init__(self, options: StagingOptions, compute: Callable[[], Any] = current_stream):
        super().__init__(options)
        self.compute = compute

    def stage(self, state_dict: Any, **kwargs: Any) -> Any:
        # DefaultStager keeps its stream private; a torch without it gets the host wait.
        fence_staging(getattr(self, "_staging_stream", None), self.compute())
        return super().stage(state_dict, **kwargs)


def staging_plan(mode: str) -> StagingPlan:
    """The staging of a mode choose_staging picked. "shared": pinned memory (fast,
    non-blocking device-to-host copies) that is also shared memory in /dev/shm (the
    writer process reads it without a copy), copied in the background; a writer process
    serialises and writes. "pinned": the same copy into pinned memory outside /dev/shm,
    written by a thread (a process would need it shared). "host" (CPU): the state
    already is host memory; a thread writes (pinned memory needs CUDA)."""
    if mode in ("shared", "pinned"):
        options = StagingOptions(
            use_pinned_memory=True,
            use_shared_memory=mode == "shared",
            use_async_staging=True,
            use_non_blocking_copy=True,
        )
        writer = AsyncCheckpointerType.PROCESS if mode == "shared" else AsyncCheckpointerType.THREAD
        return StagingPlan(options, writer)
    return StagingPlan(None, AsyncCheckpointerType.THREAD)


# Least to most demanding of the node: ranks that chose differently take the first.
STAGING_MODES = ("refused", "off", "host", "pinned", "shared")


def choose_staging(
    device_type: str, async_save: bool | None, need: int, shm_free: int, host_free: int
) -> tuple[str, str]:
    """(mode, why) for a run's async saves. `need`: the bytes one save stages on this
    node (every local rank's parameters and Adam moments); `shm_free`, `host_free`: the
    node's free /dev/shm and available memory. async_save None (the default) is on for
    a GPU when the node holds the copy, off on CPU (its saves are quick). "refused": asked
    for, and the node cannot hold it."""
    if async_save is False:
        return "off", "async_save false"
    if device_type != "cuda":
        if async_save:
            return "host", "the state is host memory already"
        return "off", "CPU: synchronous saves unless async_save is true"
    sizes = f"{_gib(need)} GiB staged per node; /dev/shm has {_gib(shm_free)} GiB free"
    if need <= shm_free:
        return "shared", sizes
    sizes += f", the host {_gib(host_free)} GiB available"
    if need <= host_free:
        return "pinned", f"{sizes}: pinned memory outside /dev/shm, a writer thread"
    if async_save:
        return "refused", sizes
    return "off", f"{sizes}: synchronous saves"


def _gib(size: int) -> float:
    return round(size / 2**30, 1)


def state_bytes(state: Any) -> int:
    """Bytes of this rank's tensors in `state` (its shards of the sharded ones): what a
    save stages."""
    total = 0
    for leaf in tree_leaves(state):
        if isinstance(leaf, DTensor):
            leaf = leaf.to_local()
        if isinstance(leaf, torch.Tensor):
            total += leaf.numel() * leaf.element_size()
    return total


class Checkpointer:
    """Owns one run's checkpoint directory. Every method is called on every rank at
    the same step (they contain collectives), except where noted."""

    def __init__(
        self,
        cfg: CheckpointConfig,
        rank: int,
        emit: Callable[..., None],
        run_config: dict[str, Any],
        tokenizer_files: list[Path],
        staging_root: Path,
        plan: StagingPlan | None = None,
        device_type: str = "cpu",
        local_world_size: int = 1,
    ) -> None:
        self.cfg = cfg
        # None: chosen at the first save, when the state's size is known (choose_staging).
        self.plan = plan
        self.device_type, self.local_world_size = device_type, local_world_size
        self.async_save = bool(cfg.async_save) if plan is not None else False
        # One stager for the run: its pinned buffers are reused by every save.
        self.stager: FencedStager | None = None
        # Uploads each rank's files of an async save after the write, off the loop.
        self.uploader = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ckpt-upload")
        self.rank = rank
        self.emit = emit
        self.run_config = run_config
        self.tokenizer_files = tokenizer_files
        self.remote = cfg.checkpoint_dir if storage.is_s3(cfg.checkpoint_dir) else None
        self.root = staging_root if self.remote else Path(str(cfg.checkpoint_dir))
        # A gloo group of its own: async writes run collectives from a background
        # thread, which must not interleave with the training loop's collectives.
        self.group = dist.new_group(backend="gloo")
        self.pending: _Pending | None = None
        self.last_saved: str | None = None
        # Local step dirs that have a marker but failed verification (see _prune).
        self.damaged: set[Path] = set()

    # --- resume -------------------------------------------------------------------
    def find_resumable(self) -> Path | None:
        """The newest complete checkpoint (downloaded if remote); reports skipped ones."""
        if not self.cfg.resume:
            return None
        return self._newest_complete_local()

    def load(self, path: Path, state: dict[str, Any]) -> int:
        """Load checkpoint `path` into `state` in place (tensors are filled, other
        values replaced); returns its step."""
        start = time.perf_counter()
        try:
            dcp.load(state, checkpoint_id=str(path), process_group=self.group)
        except CheckpointException as exc:  # raised on every rank, its str a traceback each
            raise load_error(path, exc) from exc
        step = step_of(path) or 0
        self.emit(
            "checkpoint_loaded",
            step=step,
            path=self._public_path(path),
            seconds=round(time.perf_counter() - start, 3),
        )
        return step

    def _newest_complete_local(self) -> Path | None:
        if self.remote:
            return self._download_newest_complete()
        # Every rank checks the same files, so all reach the same choice on their own.
        path, skipped = newest_intact(self.root)
        damaged = []
        for passed, reason in skipped:
            self.emit("checkpoint_skipped", path=str(passed), reason=reason)
            if is_complete(passed):
                self.damaged.add(passed)
                damaged.append((passed.name, reason))
        if path is None and damaged:
            raise all_damaged_error(str(self.cfg.checkpoint_dir), damaged)
        return path

    def _download_newest_complete(self) -> Path | None:
        assert self.remote is not None
        steps = s3_steps(self.remote)
        damaged = []
        for step in sorted(steps, reverse=True):
            if not steps[step]:
                reason = "no COMPLETE marker"
            else:
                local = self._download(step)
                problem = self._agree(verify_checkpoint(local))
                if problem is None:
                    return local
                reason = f"damaged: {problem}"
                self.damaged.add(local)
                damaged.append((local.name, reason))
            self.emit("checkpoint_skipped", path=self._remote_step(step), reason=reason)
        if damaged:
            raise all_damaged_error(self.remote, damaged)
        return None

    def _download(self, step: int) -> Path:
        """Stage remote step `step` in the local root; every rank returns its path."""
        local = step_dir(self.root, step)
        if int(os.environ.get("LOCAL_RANK", self.rank)) == 0:
            # Every node needs every shard (DCP may reshard): one download per host, since
            # ranks of a host that fetched into one cache at once saw each other's
            # half-written temp files. Staged beside the step dir, then renamed into place.
            fetched = storage.fetch(self._remote_step(step) + "/")
            local.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{local.name}-", dir=local.parent))
            shutil.copytree(fetched, staging, dirs_exist_ok=True)
            shutil.rmtree(local, ignore_errors=True)
            try:
                staging.rename(local)
            except OSError:  # another host sharing this directory placed it first
                shutil.rmtree(staging, ignore_errors=True)
        dist.barrier(group=self.group)
        return local

    def _agree(self, problem: str | None) -> str | None:
        """The first problem any rank found. Each host checks its own download, and
        all ranks must choose alike: what follows (another download, load) is collective."""
        found: list[str | None] = [None] * dist.get_world_size(self.group)
        dist.all_gather_object(found, problem, group=self.group)
        return next((p for p in found if p is not None), None)

    # --- save ---------------------------------------------------------------------
    def save(self, step: int, state: dict[str, Any], *, force_sync: bool = False) -> float:
        """Checkpoint `state` at `step`; returns the seconds the loop was blocked."""
        start = time.perf_counter()
        self.finalize(wait=True)  # one write in flight at a time
        path = step_dir(self.root, step)
        if self.rank == 0 and path.exists():
            shutil.rmtree(path)  # a leftover of an interrupted attempt at this step
        self.damaged.discard(path)  # a damaged one it replaces
        dist.barrier(group=self.group)
        plan = self.plan or self._choose_plan(state)
        use_async = self.async_save and not force_sync
        if use_async:
            if self.stager is None and plan.options is not None:
                self.stager = FencedStager(plan.options)
            response = dcp.async_save(
                state,
                checkpoint_id=str(path),
                process_group=self.group,
                async_checkpointer_type=plan.writer,
                async_stager=self.stager,
            )
            staged = None
            if isinstance(response, AsyncSaveResponse):  # staging runs in the background
                staged, response = response.staging_completion, response.upload_completion
            self.pending = _Pending(step, path, response, start, staged=staged)
            if self.remote:
                self.pending.future = self._then_upload(self.pending, response)
                self.pending.uploaded = True
        else:
            dcp.save(state, checkpoint_id=str(path), process_group=self.group)
            self.pending = _Pending(step, path, None, start)
        blocked = time.perf_counter() - start
        self.pending.blocked_s = blocked
        if not use_async:
            self.finalize(wait=True)
        return blocked

    def _choose_plan(self, state: dict[str, Any]) -> StagingPlan:
        """How async saves stage, decided at the first save (choose_staging) and the same
        on every rank: the least demanding any rank chose (one collective)."""
        need = state_bytes(state) * self.local_world_size
        mode, why = choose_staging(
            self.device_type, self.cfg.async_save, need, shm_free_bytes(), available_bytes()
        )
        chosen: list[tuple[str, str]] = [("", "")] * dist.get_world_size()  # all ranks
        dist.all_gather_object(chosen, (mode, why), group=self.group)
        mode, why = min(chosen, key=lambda c: STAGING_MODES.index(c[0]))
        if mode == "refused":
            raise ConfigError(
                f"async_save needs host memory for its staged copy: {why}; set async_save "
                "false, or give the node more /dev/shm (a pod's shm_size_gib) or memory"
            )
        self.emit("checkpoint_staging", mode=mode, why=why, staged_gib_per_node=_gib(need))
        self.async_save = mode != "off"
        self.plan = staging_plan(mode)
        return self.plan

    def wait_staged(self) -> None:
        """Wait until an async save's state is copied off the weights: call before the
        optimizer changes them. (No collective.)"""
        if self.pending is not None and self.pending.staged is not None:
            self.pending.staged.result()
            self.pending.staged = None

    def _then_upload(self, pending: _Pending, written: Future) -> Future:
        """A future for the write and then this rank's upload of it (rank 0: with the
        metadata and sidecar files), run by the uploader thread."""

        def write_then_upload() -> None:
            written.result()
            if self.rank == 0:
                self._write_sidecar_files(pending.path)
            self._upload_files(pending)

        return self.uploader.submit(write_then_upload)

    def pending_done(self) -> bool:
        """This rank's view (no collective): is the write in flight finished?"""
        return self.pending is None or self.pending.future is None or self.pending.future.done()

    def finalize(self, *, wait: bool) -> None:
        """Mark the pending checkpoint complete. Call on every rank at the same step,
        with wait=False only when all ranks agreed their writes are done."""
        pending, self.pending = self.pending, None
        if pending is None:
            return
        if pending.staged is not None:
            pending.staged.result()
        if pending.future is not None:
            pending.future.result()  # re-raises a failed write (or upload)
        if self.rank == 0 and not pending.uploaded:
            self._write_sidecar_files(pending.path)
        if self.remote and not pending.uploaded:
            self._upload_files(pending)
        if self.remote:  # every rank's files are up before the marker
            dist.barrier(group=self.group)
        if self.rank == 0:
            marker = {"step": pending.step, "world_size": dist.get_world_size()}
            marker["saved_at"] = time.time()
            (pending.path / MARKER).write_text(json.dumps(marker) + "\n")
            if self.remote:
                storage.upload_dir(pending.path, self._remote_step(pending.step), only=(MARKER,))
            self._prune()
        self.last_saved = self._public_path(pending.path)
        self.emit(
            "checkpoint_saved",
            step=pending.step,
            path=self.last_saved,
            async_save=pending.future is not None,
            blocked_s=round(pending.blocked_s, 3),
            seconds=round(time.perf_counter() - pending.started, 3),
        )

    def close(self) -> None:
        """Finish a write in flight (e.g. the last good checkpoint before an error)."""
        if self.pending is not None:
            self.finalize(wait=True)
        self.uploader.shutdown(wait=True)
        if self.stager is not None:
            self.stager.close()
            self.stager = None

    # --- helpers ------------------------------------------------------------------
    def _write_sidecar_files(self, path: Path) -> None:
        (path / CONFIG_FILE).write_text(json.dumps(self.run_config, indent=2) + "\n")
        if self.tokenizer_files:
            tok_dir = path / TOKENIZER_DIR
            tok_dir.mkdir(exist_ok=True)
            for file in self.tokenizer_files:
                shutil.copy2(file, tok_dir / Path(file).name)

    def _remote_step(self, step: int) -> str:
        assert self.remote is not None
        return storage.join(self.remote, f"step-{step}")

    def _upload_files(self, pending: _Pending) -> None:
        # Each rank uploads the shard files it wrote; rank 0 also the metadata and
        # sidecars. The marker follows once every rank's upload is done (finalize).
        mine = f"__{self.rank}_"
        names = [p.name for p in pending.path.iterdir() if p.name.startswith(mine)]
        if self.rank == 0:
            names += [p.name for p in pending.path.iterdir() if not p.name.startswith("__")]
        names = [n for n in names if n != MARKER]
        storage.upload_dir(pending.path, self._remote_step(pending.step), only=tuple(names))

    def _prune(self) -> None:
        """Rank 0: drop complete checkpoints beyond keep_last and dead partial ones."""
        dirs = step_dirs(self.root)
        # A damaged dir skipped at resume is no checkpoint: counted towards keep_last,
        # a newer damaged one would get the good ones deleted.
        complete = [p for p in dirs if is_complete(p) and p not in self.damaged]
        doomed = complete[: -self.cfg.keep_last] if self.cfg.keep_last else []
        if complete:  # partial saves older than the newest complete one can never resume
            newest = step_of(complete[-1]) or 0
            doomed += [p for p in dirs if p not in complete and (step_of(p) or 0) < newest]
        for path in doomed:
            shutil.rmtree(path, ignore_errors=True)
            if self.remote:
                storage.delete_prefix(self._remote_step(step_of(path) or 0))

    def _public_path(self, path: Path) -> str:
        step = step_of(path)
        return self._remote_step(step or 0) if self.remote else str(path)


def staging_root(output_dir: str | None, checkpoint_dir: str, local_rank: int) -> Path:
    """Where an s3:// checkpoint_dir is staged on this host: under output_dir, else one
    temporary directory per host. Local rank 0 downloads into it for every rank of its
    host, so they must all name the same one (a directory per rank left rank 1 loading
    from an empty one). Called on every rank."""
    if output_dir:
        return Path(output_dir) / "checkpoints"
    if not storage.is_s3(checkpoint_dir):
        return Path(tempfile.gettempdir()) / "unused-staging"  # the checkpoint_dir is local
    made = tempfile.mkdtemp(prefix="trainer-") if local_rank == 0 else None
    found: list[tuple[str, str | None]] = [("", None)] * dist.get_world_size()
    dist.all_gather_object(found, (socket.gethostname(), made))
    host = socket.gethostname()
    ours = next(path for name, path in found if name == host and path is not None)
    return Path(ours) / "checkpoints"


def all_damaged_error(where: str, damaged: list[tuple[str, str]]) -> ConfigError:
    """Complete checkpoints exist but none verifies: starting over silently would
    throw the run away, so stop and say what to do. `damaged`: (name, reason), newest first."""
    name, reason = damaged[0]
    older = len(damaged) - 1
    more = f"; {older} older one{'s' if older > 1 else ''} too" if older else ""
    problem = reason.removeprefix("damaged: ")
    return ConfigError(
        f"checkpoint_dir {where}: every complete checkpoint is damaged ({name}: {problem}{more}); "
        "move it aside or delete the damaged step directories to start over, or set "
        "checkpoint_dir to another directory"
    )


def load_error(path: Path, exc: CheckpointException) -> Exception:
    """One line for a load that failed although the checkpoint verified (e.g. corrupt
    bytes). I/O errors may pass on retry; anything else will fail the same way again."""
    causes = [_cause(failure) for failure in exc.failures.values()]
    detail = failure_summary(exc)
    if causes and all(_transient(c) for c in causes):
        return CheckpointReadError(f"cannot read checkpoint {path} ({detail})")
    # The detail goes last: where the line is cut short, the next step survives.
    return ConfigError(
        f"cannot load checkpoint {path}; if it is damaged, delete that step directory or "
        f"move it aside to resume from the one before ({detail})"
    )


def failure_summary(exc: CheckpointException) -> str:
    """'rank R: Type: first line' of DCP's first failure; its str is a traceback per rank."""
    if not exc.failures:
        return first_line(str(exc), 160)
    rank = min(exc.failures)
    cause = _cause(exc.failures[rank])
    text = f"rank {rank}: {type(cause).__name__}: {first_line(str(cause), 160)}"
    others = len(exc.failures) - 1
    return text + (f" (and {others} more rank{'s' if others > 1 else ''})" if others else "")


def first_line(text: str, limit: int) -> str:
    """The first non-empty line of `text`, at most `limit` characters ('…' when cut)."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


def _cause(failure: Any) -> BaseException | Any:
    return failure[0] if isinstance(failure, tuple) else failure


def _transient(cause: Any) -> bool:
    # A file gone is not coming back; EIO, ESTALE, a timeout on a network volume may.
    return isinstance(cause, OSError) and not isinstance(cause, FileNotFoundError)


def rng_state() -> dict[str, torch.Tensor]:
    state = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict[str, torch.Tensor]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
