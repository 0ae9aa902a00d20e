"""Weights & Biases for rank 0's events (trainer/tracking.py's sinks), through the `wandb`
SDK (the `wandb` extra: about 50 MB with its wandb-core service binary, so it is imported
only when W&B is enabled, and only the image that asks for it carries it).

Enabled by the user's own environment, as W&B's client reads it: WANDB_API_KEY (a
Kubernetes job gets it from a Secret: tracking_env.py), or WANDB_MODE=offline (the run
is written under the run's directory and uploaded later with `wandb sync`);
WANDB_PROJECT, WANDB_ENTITY and WANDB_BASE_URL (a self-hosted server) as W&B documents
them. WANDB_MODE=disabled turns it off.

A W&B that is down or slow never stops or stalls training: the SDK is driven from a
daemon thread (wandb.init waits up to INIT_TIMEOUT_S for the server, then fails), the
training thread only queues values, a failure is told once on stderr and the sink then
drops what comes. The console is left alone (console="off"): the step lines on stdout
are the tools' and must not be rewritten."""

from __future__ import annotations

import importlib.util
import threading
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ENV_KEY = "WANDB_API_KEY"
ENV_MODE = "WANDB_MODE"
ENV_PROJECT = "WANDB_PROJECT"
ENV_INIT_TIMEOUT = "WANDB_INIT_TIMEOUT"
DEFAULT_PROJECT = "fsdp-eks"
INIT_TIMEOUT_S = 30.0
FINAL_WAIT_S = 30.0  # at the end: how long the run's last records may take to go out
MAX_PENDING = 20_000  # queued calls while the run starts: the newest kept


def enabled(environ: Mapping[str, str]) -> bool:
    """Whether the user turned W&B on: a key, or offline runs; never when disabled."""
    mode = environ.get(ENV_MODE, "").lower()
    if mode in ("disabled", "dryrun"):
        return False
    return bool(environ.get(ENV_KEY)) or mode == "offline"


class WandbSink:
    """One W&B run, written from a daemon thread (`start`, `metrics`, `finish` queue a
    call and return)."""

    name = "wandb"

    def __init__(
        self,
        environ: Mapping[str, str],
        run_name: str,
        directory: Path | None,
        warnings: Any,
        init_timeout: float | None = None,
    ) -> None:
        # The `wandb` extra: missing, an ImportError (told once, the sink left out); found,
        # imported by the sink's thread (seconds of imports the first step does not wait).
        if importlib.util.find_spec("wandb") is None:
            raise ImportError("No module named 'wandb'", name="wandb")
        self.wandb: Any = None
        self.run_name, self.directory = run_name, directory
        self.mode: Any = environ.get(ENV_MODE) or None  # wandb checks its values
        self.project = environ.get(ENV_PROJECT) or DEFAULT_PROJECT
        self.warnings = warnings
        # W&B's own variable where the user set one (a slow self-hosted server).
        self.init_timeout = init_timeout or float(environ.get(ENV_INIT_TIMEOUT) or INIT_TIMEOUT_S)
        self.run: Any = None
        self.place: dict[str, str] = {}
        self.failed = False
        self._calls: deque[tuple[str, tuple[Any, ...]]] = deque(maxlen=MAX_PENDING)
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="wandb", daemon=True)
        self._thread.start()

    def where(self) -> dict[str, str]:
        return dict(self.place)

    def start(self, params: Mapping[str, str], tags: Mapping[str, str]) -> None:
        self._queue("start", dict(params), dict(tags))

    def metrics(self, step: int, values: Mapping[str, float]) -> None:
        self._queue("metrics", step, dict(values))

    def finish(self, status: str, tags: Mapping[str, str]) -> None:
        self._queue("finish", status, dict(tags))

    def close(self, wait: float = FINAL_WAIT_S) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(wait)

    def _queue(self, what: str, *args: Any) -> None:
        if self.failed:
            return
        with self._cond:
            self._calls.append((what, args))
            self._cond.notify_all()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._calls and not self._closed:
                    self._cond.wait()
                if not self._calls:  # closed and nothing left
                    break
                what, args = self._calls.popleft()
            if self.failed:
                continue
            try:
                getattr(self, f"_{what}")(*args)
            except Exception as exc:  # noqa: BLE001 (tracking must never stop training)
                self.failed = True
                self.warnings.failed(self.name, f"{what} ({self.project})", exc)
        if self.run is not None and not self.failed:
            try:
                self.run.finish()
            except Exception as exc:  # noqa: BLE001
                self.warnings.failed(self.name, "finishing the run", exc)

    def _start(self, params: dict[str, str], tags: dict[str, str]) -> None:
        import wandb  # here, on the sink's thread (see __init__)

        self.wandb = wandb
        settings = wandb.Settings(init_timeout=self.init_timeout, console="off", silent=True)
        self.run = wandb.init(
            project=self.project,
            name=self.run_name,
            config={**params, **tags},
            tags=[f"{k}:{v}"[:64] for k, v in tags.items()],
            dir=str(self.directory) if self.directory else None,
            settings=settings,
            mode=self.mode,
            reinit="create_new",
        )
        url = getattr(self.run, "url", None)
        if url:
            self.place = {"wandb": str(url)}
        else:  # offline: the run's files, uploaded later
            sync_dir = str(getattr(self.run.settings, "sync_dir", "") or "")
            self.place = {"wandb": f"offline run {sync_dir} (upload: wandb sync {sync_dir})"}

    def _metrics(self, step: int, values: dict[str, float]) -> None:
        if self.run is not None:
            self.run.log(values, step=step)

    def _finish(self, status: str, tags: dict[str, str]) -> None:
        if self.run is None:
            return
        for key, value in tags.items():
            self.run.summary[key] = value
        self.run.summary["status"] = status
        self.run.finish(exit_code=0 if status == "FINISHED" else 1)
        self.run = None
