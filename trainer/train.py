"""The training run, top to bottom (torchtitan's order):

    setup (device, threads, process group)       build.setup_device
    -> data (tokenize, pack, hold out)           dataset.build_data
    -> checkpoints: where to resume from         build.build_checkpointer
    -> model, on the meta device                 build.build_model
    -> parallelize: AC, compile, FSDP2           build.parallelize
    -> this rank's shard: HF weights or random   build.init_weights
    -> AdamW + LR schedule                       build.build_optimizer, build_lr_scheduler
    -> restore the newest complete checkpoint    build.restore
    -> loop of train_step, with hooks            loop.TrainLoop: log, evaluate, checkpoint,
                                                 stop (one step's pieces: step.py)
    -> summary -> teardown

`main()` is the one place where exceptions become a JSON error line and an exit code.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.elastic.multiprocessing.errors import get_error_handler

from trainer import device as devices
from trainer import progress_status, tracking
from trainer.build import (
    build_checkpointer,
    build_lr_scheduler,
    build_model,
    build_optimizer,
    init_weights,
    parallelize,
    restore,
    setup_device,
    trace_dir,
    tune_host_memory,
    write_run_config,
)
from trainer.checkpoint import failure_summary, first_line
from trainer.config import ConfigError, TrainConfig, device_problems
from trainer.config_loader import load_config
from trainer.dataset import build_data
from trainer.device import flight_recorder_dumps
from trainer.distributed import DistEnv, StopRequest, init_distributed
from trainer.loop import TrainLoop
from trainer.metrics import Emit, MetricsEmitter, format_line
from trainer.rules import EXIT_CONFIG, EXIT_FAILURE, EXIT_PREEMPTED
from trainer.step import NonFiniteLossError
from trainer.tokenizer import load_tokenizer

# The error line's message: one line this long at most; the traceback goes to stderr.
MESSAGE_LIMIT = 300


def train(
    cfg: TrainConfig, env: DistEnv, emit: Emit, stop: StopRequest | None = None
) -> dict[str, Any]:
    device, backend = setup_device(env, cfg.parallel.cpu_offload)
    if "nccl" in backend:  # before the process group exists, which reads them
        os.environ.update(devices.flight_recorder_env(trace_dir(cfg), dict(os.environ)))
    init_distributed(backend, device, env)
    try:
        summary = _train(cfg, env, emit, device, backend, stop or StopRequest())
        # No rank may tear down its gloo connections while another still uses them:
        # a peer that exits first can make the other abort at exit (SIGABRT).
        dist.barrier()
        return summary
    finally:
        dist.destroy_process_group()


def _train(
    cfg: TrainConfig,
    env: DistEnv,
    emit: Emit,
    device: torch.device,
    backend: str,
    stop: StopRequest,
) -> dict[str, Any]:
    if problems := device_problems(cfg, has_gpu=device.type == "cuda"):
        raise ConfigError("; ".join(problems))
    tokenizer = load_tokenizer(cfg.data.tokenizer)
    data = build_data(cfg, tokenizer, env)
    checkpointer, resume_from = build_checkpointer(cfg, env, emit, tokenizer, device.type)
    model = build_model(cfg)
    tune_host_memory(model, device, env)
    fp8 = parallelize(model, cfg, device, env)
    init_weights(model, cfg, device, resuming=resume_from is not None)
    optimizer = build_optimizer(model, cfg, device.type)
    scheduler = build_lr_scheduler(optimizer, cfg)
    step = restore(checkpointer, resume_from, model, optimizer, scheduler, data.batches)
    write_run_config(cfg)
    loop = TrainLoop(cfg, model, optimizer, scheduler, data, checkpointer, device, emit, stop, fp8)
    loop.emit_start(backend, step)
    return loop.run(step, resume_from)


# --- the entry point --------------------------------------------------------------------


def error_fields(exc: BaseException) -> dict[str, Any]:
    """The error event's fields. `retryable` false tells a supervisor to stop restarting:
    the same configuration fails the same way again."""
    # DCP's own str is a traceback per rank; its failures say what happened.
    text = failure_summary(exc) if isinstance(exc, CheckpointException) else str(exc)
    return {
        "error_type": type(exc).__name__,
        "message": first_line(text, MESSAGE_LIMIT),
        "retryable": not isinstance(exc, ConfigError),
    }


def record_error(exc: BaseException, flight_recorder: str | None) -> None:
    """torchrun's error file (a no-op unless it set TORCHELASTIC_ERROR_FILE): the
    exception, and where the flight recorder dumps, for the doctor to read."""
    get_error_handler().record_exception(exc)
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not flight_recorder or not path or not os.path.isfile(path):
        return
    data = json.loads(Path(path).read_text())
    data["message"]["extraInfo"]["nccl_flight_recorder"] = flight_recorder
    Path(path).write_text(json.dumps(data))


def main(argv: list[str] | None = None) -> int:
    """Run a training job; returns the process exit code.

    Expected failures (bad config, divergence) become an error line and an exit code,
    and are written to torchrun's error file so its failure report names the cause.
    The line's message is one bounded line; `retryable` is false for a ConfigError.
    Anything else also gets an error line, then is re-raised so `record` (on the entry
    point in __main__.py) writes it to the error file and the traceback reaches
    stderr. SIGTERM -> checkpoint -> EXIT_PREEMPTED.
    """
    env = DistEnv.from_environ()
    metrics = MetricsEmitter(env.rank)
    # Kubeflow Trainer v2's status server, where its controller named one (rank 0 posts).
    progress = progress_status.from_environ(os.environ, env.rank)
    emit = progress.observe(metrics.emit) if progress is not None else metrics.emit
    stop = StopRequest()

    def report(exc: BaseException, *, reraised: bool = False) -> None:
        fields = error_fields(exc)
        if not reraised and exc.__cause__ is not None:
            # A handled error that wraps another: the one-line message leaves out the
            # cause's detail, which belongs in the log (a re-raised one prints its own).
            traceback.print_exception(exc, file=sys.stderr)
        dumps = flight_recorder_dumps(os.environ)
        if dumps:
            fields["nccl_flight_recorder"] = dumps
        if env.rank == 0:
            metrics.emit("error", **fields)
            if tracker is not None:  # the tracked run ends FAILED
                tracker.on_event("error", fields)
        else:  # stdout belongs to rank 0; other ranks still say what went wrong
            print(format_line("error", rank=env.rank, **fields), file=sys.stderr, flush=True)
        record_error(exc, dumps)

    tracker: tracking.Tracking | None = None
    stop.install()
    try:
        cfg = load_config(argv)
        # TensorBoard / MLflow (rank 0; never stops training: trainer/tracking.py).
        tracker = tracking.from_environ(os.environ, env.rank, cfg.to_dict())
        summary = train(cfg, env, tracker.observe(emit) if tracker else emit, stop)
    except ConfigError as exc:
        report(exc)
        return EXIT_CONFIG
    except NonFiniteLossError as exc:
        report(exc)
        return EXIT_FAILURE
    except (Exception, CheckpointException) as exc:  # DCP's is a BaseException
        report(exc, reraised=True)
        raise
    finally:
        stop.uninstall()
        if tracker is not None:
            tracker.close()  # what is queued goes out (bounded wait)
        if progress is not None:
            progress.close()  # the final post goes out (bounded wait)
    return EXIT_PREEMPTED if summary["preempted"] else 0
