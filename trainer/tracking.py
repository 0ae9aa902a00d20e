"""Experiment tracking: rank 0's events go to the tools ML engineers already have open.

- TensorBoard: event files under `<output_dir or local checkpoint_dir>/tensorboard`,
  written by tensorboardX (about 0.65 MB, plus protobuf's 2.2 MB; numpy is already in the
  image). torch.utils.tensorboard would need the whole `tensorboard` package (its server,
  grpcio, werkzeug: over 20 MB) for the same file. tensorboardX queues the records and
  writes them from its own thread.
- MLflow, when MLFLOW_TRACKING_URI names an http(s) server: MLflow's REST API over the
  standard library (http.client, no redirects followed: a token goes to that server
  only). The mlflow client (70 MB installed; mlflow-skinny still pulls a large tree)
  would grow the image for a handful of POSTs. One run per job: its params (the
  trainer's config, flattened), the step lines' metrics at their steps, tags naming the
  job and its image, and at the end the last checkpoint (the model the run produced;
  `trainer.export` exports it) and the run's status.
- Weights & Biases, when the user enables it (WANDB_API_KEY, or WANDB_MODE=offline):
  the `wandb` SDK from its own extra, driven from a daemon thread (trainer/wandb_tracking.py).

The URI comes only from the environment the job was deployed from (the tools never
take it as an argument: the same rule as HF_ENDPOINT, so no call can send a run's data
and its token elsewhere). A tracking server that is down or slow never stops or stalls
training: requests go out from a daemon thread with short timeouts, the training
thread only hands over values, a failure is told once on stderr and counted after.
Once the run exists rank 0 prints a `tracking` line naming where the run is tracked;
the job tools show it.
"""

from __future__ import annotations

import base64
import http.client
import json
import math
import os
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from trainer import wandb_tracking
from trainer.warn_once import FirstFailures

Emit = Callable[..., None]

ENV_MLFLOW_URI = "MLFLOW_TRACKING_URI"
ENV_MLFLOW_EXPERIMENT = "MLFLOW_EXPERIMENT_NAME"
ENV_MLFLOW_TOKEN = "MLFLOW_TRACKING_TOKEN"
ENV_MLFLOW_USER = "MLFLOW_TRACKING_USERNAME"
ENV_MLFLOW_PASSWORD = "MLFLOW_TRACKING_PASSWORD"
# Set by the deploying tools: the job's name and image, for the run's name and tags.
ENV_JOB_NAME = "FSDP_EKS_JOB_NAME"
ENV_IMAGE = "FSDP_EKS_IMAGE"
DEFAULT_EXPERIMENT = "fsdp-eks"
TENSORBOARD_DIR = "tensorboard"

REQUEST_TIMEOUT_S = 2.0
# At the end: how long the process waits for what is queued to go out.
FINAL_WAIT_S = 5.0
# A server that failed: the next try no sooner than this (a dead one costs nothing).
RETRY_AFTER_S = 30.0
# Metrics waiting for a down server: the newest this many are kept (bounded memory).
MAX_PENDING_METRICS = 20_000
# MLflow's own limits on one log-batch call (docs: REST API, LogBatch).
BATCH_METRICS = 1000
BATCH_PARAMS = 100
PARAM_VALUE_MAX = 6000

# The step line's numbers tracked, under the same names (an eval line's loss becomes
# eval_loss). Per-rank fields (slowest_rank, ...) and wall clocks are left out.
STEP_METRICS = (
    "loss",
    "lr",
    "grad_norm",
    "tokens_per_s",
    "tokens_per_s_per_device",
    "mfu",
    "step_s",
    "mem_mb",
    "mem_reserved_mb",
    "alloc_retries",
    "rank_lag_s",
    "gpu_util_mean",
    "gpu_util_min",
    "gpu_mem_used_mb_max",
    "gpu_power_w_max",
    "gpu_temp_c_max",
)


def step_metrics(event: str, fields: Mapping[str, Any]) -> dict[str, float]:
    """The numbers to track of one trainer event (empty: nothing to track)."""
    if event == "eval":
        names = {"loss": "eval_loss", "perplexity": "eval_perplexity"}
    elif event == "step":
        names = {name: name for name in STEP_METRICS}
    else:
        return {}
    values: dict[str, float] = {}
    for key, name in names.items():
        value = fields.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if math.isfinite(value):
                values[name] = float(value)
    return values


def flat_params(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """The trainer's config as MLflow params: dotted names, string values (None left out)."""
    params: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            params.update(flat_params(value, f"{name}."))
        elif value is not None:
            params[name] = str(value)[:PARAM_VALUE_MAX]
    return params


class Warnings(FirstFailures):
    """Each sink's first failure told on stderr; later ones counted (warn_once.py)."""

    def failed(self, source: str, what: str, exc: BaseException) -> None:
        super().failed(f"tracking: {source}", what, exc)


# --- TensorBoard ----------------------------------------------------------------------


class TensorBoardSink:
    """Scalars into event files under `logdir` (tensorboardX writes from its own thread)."""

    name = "tensorboard"

    def __init__(self, logdir: Path) -> None:
        from tensorboardX import SummaryWriter  # the image's; only rank 0 with a dir

        self.logdir = logdir
        self.writer = SummaryWriter(logdir=str(logdir), flush_secs=10)

    def where(self) -> dict[str, str]:
        return {"tensorboard": str(self.logdir)}

    def start(self, params: Mapping[str, str], tags: Mapping[str, str]) -> None:
        text = "\n".join(f"    {k} = {v}" for k, v in {**tags, **params}.items())
        self.writer.add_text("config", text, 0)

    def metrics(self, step: int, values: Mapping[str, float]) -> None:
        for name, value in values.items():
            self.writer.add_scalar(name, value, step)

    def finish(self, status: str, tags: Mapping[str, str]) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


# --- MLflow over its REST API ---------------------------------------------------------


class MlflowRest:
    """The few MLflow REST calls a run needs (api/2.0/mlflow), one connection per call,
    never following a redirect (the credentials go to the configured server only)."""

    def __init__(
        self, uri: str, environ: Mapping[str, str], timeout: float = REQUEST_TIMEOUT_S
    ) -> None:
        url = urllib.parse.urlsplit(uri)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(
                f"{ENV_MLFLOW_URI} must be an http(s) tracking server (got scheme "
                f"{url.scheme!r}); a file store or databricks URI is not supported here"
            )
        self.uri = uri.rstrip("/")
        self.url, self.timeout = url, timeout
        self.headers = {"Content-Type": "application/json", **_auth_header(environ)}

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        url = self.url
        cls = http.client.HTTPSConnection if url.scheme == "https" else http.client.HTTPConnection
        conn = cls(url.hostname or "", url.port, timeout=self.timeout)
        full = f"{url.path.rstrip('/')}/api/2.0/mlflow/{path}"
        data = None
        if method == "GET" and body:
            full += "?" + urllib.parse.urlencode(body)
        elif body is not None:
            data = json.dumps(body).encode()
        try:
            conn.request(method, full, body=data, headers=self.headers)
            response = conn.getresponse()
            answer = response.read(1 << 20)
        finally:
            conn.close()
        if response.status != 200:
            raise MlflowError(response.status, answer)
        return json.loads(answer or b"{}")

    def experiment_id(self, name: str) -> str:
        """The experiment's id, created when it does not exist yet."""
        try:
            found = self.call("GET", "experiments/get-by-name", {"experiment_name": name})
            return str(found["experiment"]["experiment_id"])
        except MlflowError as exc:
            if exc.code != "RESOURCE_DOES_NOT_EXIST":
                raise
        try:
            return str(self.call("POST", "experiments/create", {"name": name})["experiment_id"])
        except MlflowError as exc:  # another job created it meanwhile
            if exc.code != "RESOURCE_ALREADY_EXISTS":
                raise
            found = self.call("GET", "experiments/get-by-name", {"experiment_name": name})
            return str(found["experiment"]["experiment_id"])

    def run_url(self, experiment_id: str, run_id: str) -> str:
        return f"{self.uri}/#/experiments/{experiment_id}/runs/{run_id}"


class MlflowError(RuntimeError):
    def __init__(self, status: int, answer: bytes) -> None:
        try:
            body = json.loads(answer)
            self.code, message = str(body.get("error_code")), str(body.get("message"))
        except (ValueError, AttributeError):
            self.code, message = "", answer[:200].decode(errors="replace")
        super().__init__(f"HTTP {status} {self.code}: {message[:200]}")


def _auth_header(environ: Mapping[str, str]) -> dict[str, str]:
    """MLflow's own client variables: a bearer token, else basic auth."""
    if token := environ.get(ENV_MLFLOW_TOKEN):
        return {"Authorization": f"Bearer {token}"}
    user, password = environ.get(ENV_MLFLOW_USER), environ.get(ENV_MLFLOW_PASSWORD)
    if user and password:
        pair = base64.b64encode(f"{user}:{password}".encode()).decode()
        return {"Authorization": f"Basic {pair}"}
    return {}


def _now_ms() -> int:
    return int(time.time() * 1000)


class MlflowSink:
    """One MLflow run, written from a daemon thread: the training thread appends to the
    pending lists and returns; the thread creates the run, then sends what is pending in
    log-batch calls. A failed call leaves its items pending and waits RETRY_AFTER_S."""

    name = "mlflow"

    def __init__(
        self,
        rest: MlflowRest,
        experiment: str,
        run_name: str,
        warnings: Warnings,
        retry_after: float = RETRY_AFTER_S,
    ) -> None:
        self.rest, self.experiment, self.run_name = rest, experiment, run_name
        self.warnings, self.retry_after = warnings, retry_after
        self.experiment_id: str | None = None
        self.run_id: str | None = None
        self._params: list[dict[str, str]] = []
        self._tags: list[dict[str, str]] = []
        self._metrics: list[dict[str, Any]] = []
        self._end: tuple[str, int] | None = None  # status, end time (ms)
        self._closed = False
        self._busy = False
        self._next_try = 0.0
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="mlflow", daemon=True)
        self._thread.start()

    def where(self) -> dict[str, str]:
        if self.run_id is None or self.experiment_id is None:
            return {}
        return {"mlflow": self.rest.run_url(self.experiment_id, self.run_id)}

    def start(self, params: Mapping[str, str], tags: Mapping[str, str]) -> None:
        with self._cond:
            self._params += [{"key": k, "value": v} for k, v in params.items()]
            self._tags += [{"key": k, "value": v} for k, v in tags.items()]
            self._cond.notify_all()

    def metrics(self, step: int, values: Mapping[str, float]) -> None:
        stamp = _now_ms()
        rows = [{"key": k, "value": v, "timestamp": stamp, "step": step} for k, v in values.items()]
        with self._cond:
            self._metrics += rows
            if len(self._metrics) > MAX_PENDING_METRICS:  # a long outage: keep the newest
                del self._metrics[: len(self._metrics) - MAX_PENDING_METRICS]
            self._cond.notify_all()

    def finish(self, status: str, tags: Mapping[str, str]) -> None:
        with self._cond:
            self._tags += [{"key": k, "value": v} for k, v in tags.items()]
            self._end = (status, _now_ms())
            self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to `timeout` s until everything handed over was sent (or is waiting
        for a server that failed)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._busy or (self._has_work() and time.monotonic() >= self._next_try):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
            return not self._has_work()

    def close(self, wait: float = FINAL_WAIT_S) -> None:
        self.wait_idle(wait)
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _has_work(self) -> bool:
        if self._end is not None and self._end[0] != "sent":
            return True
        return bool(self._params or self._tags or self._metrics)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (
                    not self._has_work() or time.monotonic() < self._next_try
                ):
                    left = self._next_try - time.monotonic()
                    self._cond.wait(left if self._has_work() and left > 0 else None)
                if self._closed:
                    return
                self._busy = True
            try:
                self._send()
            except Exception as exc:  # noqa: BLE001 (tracking must never stop training)
                self._next_try = time.monotonic() + self.retry_after
                self.warnings.failed(self.name, f"logging to {self.rest.uri}", exc)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _send(self) -> None:
        rest = self.rest
        if self.run_id is None:
            self.experiment_id = rest.experiment_id(self.experiment)
            run = rest.call(
                "POST",
                "runs/create",
                {
                    "experiment_id": self.experiment_id,
                    "run_name": self.run_name,
                    "start_time": _now_ms(),
                },
            )
            self.run_id = str(run["run"]["info"]["run_id"])
        with self._cond:
            params, self._params = self._params[:BATCH_PARAMS], self._params[BATCH_PARAMS:]
            tags, self._tags = self._tags[:BATCH_PARAMS], self._tags[BATCH_PARAMS:]
            metrics, self._metrics = self._metrics[:BATCH_METRICS], self._metrics[BATCH_METRICS:]
            end = self._end if not (self._params or self._tags or self._metrics) else None
        try:
            if params or tags or metrics:
                body = {"run_id": self.run_id, "params": params, "tags": tags, "metrics": metrics}
                rest.call("POST", "runs/log-batch", body)
            if end is not None and end[0] != "sent":
                rest.call(
                    "POST",
                    "runs/update",
                    {"run_id": self.run_id, "status": end[0], "end_time": end[1]},
                )
                with self._cond:
                    self._end = ("sent", end[1])
        except Exception:
            with self._cond:  # back in front, sent again on the next try
                self._params[:0], self._tags[:0], self._metrics[:0] = params, tags, metrics
            raise


# --- the observer ---------------------------------------------------------------------


class Tracking:
    """Watches the trainer's events (`observe(emit)`) and hands them to the sinks. Prints
    one `tracking` line (through the trainer's own emit) once every sink knows where the
    run is, or at the end with what is known."""

    def __init__(
        self,
        sinks: list[Any],
        params: Mapping[str, str],
        tags: Mapping[str, str],
        warnings: Warnings,
    ) -> None:
        self.sinks, self.params, self.tags, self.warnings = sinks, params, tags, warnings
        self.emit: Emit | None = None
        self.announced: dict[str, str] = {}

    def observe(self, emit: Emit) -> Emit:
        self.emit = emit

        def emit_and_track(event: str, **fields: Any) -> None:
            emit(event, **fields)
            self.on_event(event, fields)

        return emit_and_track

    def _each(self, what: str, call: Callable[[Any], None]) -> None:
        for sink in self.sinks:
            try:
                call(sink)
            except Exception as exc:  # noqa: BLE001 (tracking must never stop training)
                self.warnings.failed(sink.name, what, exc)

    def on_event(self, event: str, fields: Mapping[str, Any]) -> None:
        if event == "start":
            start_params = {
                k: str(fields[k]) for k in ("world_size", "device", "params") if k in fields
            }
            params = {**self.params, **start_params}
            self._each("starting the run", lambda s: s.start(params, self.tags))
        elif values := step_metrics(event, fields):
            step = int(fields.get("step") or 0)
            self._each("logging metrics", lambda s: s.metrics(step, values))
        elif event in ("summary", "error", "preempted"):
            status = {"summary": "FINISHED", "error": "FAILED", "preempted": "KILLED"}[event]
            end_tags = {"checkpoint": str(fields["checkpoint"])} if fields.get("checkpoint") else {}
            self._each("ending the run", lambda s: s.finish(status, end_tags))
        self.announce()

    def announce(self, final: bool = False) -> None:
        """The `tracking` line, once, when each sink named where it is (or `final`)."""
        if self.announced or self.emit is None:
            return
        places = [sink.where() for sink in self.sinks]
        if not final and not all(places):
            return
        where = {k: v for place in places for k, v in place.items()}
        if where:
            self.announced = where
            self.emit("tracking", **where)

    def close(self) -> None:
        """Send what is left (bounded wait), then say where the run is if not yet said."""
        self._each("closing", lambda s: s.close())
        self.announce(final=True)


def tensorboard_dir(output_dir: str | None, checkpoint_dir: str | None) -> Path | None:
    """Where the event files go: the run's output dir, else beside a local checkpoint
    root (None: the run keeps no local files, e.g. checkpoints on s3://)."""
    base = output_dir or (
        checkpoint_dir if checkpoint_dir and not checkpoint_dir.startswith("s3://") else None
    )
    return Path(base) / TENSORBOARD_DIR if base else None


def run_name(environ: Mapping[str, str]) -> str:
    """The job's name as the tools know it (the run's name in MLflow): named outright,
    else the local target's run directory, else torchrun's rendezvous id (the Kubernetes
    target's is the job's name; the local target's is torchrun's default)."""
    return (
        environ.get(ENV_JOB_NAME)
        or os.path.basename(environ.get("FSDP_EKS_RUN_DIR", "").rstrip("/"))
        or environ.get("TORCHELASTIC_RUN_ID")
        or "trainer"
    )


def from_environ(
    environ: Mapping[str, str],
    rank: int,
    config: Mapping[str, Any],
    log: TextIO | None = None,
) -> Tracking | None:
    """Rank 0's tracking, or None (another rank, or nowhere to track to): TensorBoard when
    the run has a local directory, MLflow when MLFLOW_TRACKING_URI is set, W&B when the
    user enabled it (wandb_tracking.enabled). A sink that
    cannot start (no tensorboardX in an older image, a URI that is not a server) is told
    once on stderr and left out."""
    if rank != 0:
        return None
    warnings = Warnings(log)
    sinks: list[Any] = []
    checkpoint = config.get("checkpoint") or {}
    logdir = tensorboard_dir(config.get("output_dir"), checkpoint.get("checkpoint_dir"))
    if logdir is not None:
        try:
            sinks.append(TensorBoardSink(logdir))
        except Exception as exc:  # noqa: BLE001 (ImportError, an unwritable dir)
            warnings.failed("tensorboard", f"writing to {logdir}", exc)
    name = run_name(environ)
    if uri := environ.get(ENV_MLFLOW_URI):
        try:
            rest = MlflowRest(uri, environ)
            experiment = environ.get(ENV_MLFLOW_EXPERIMENT) or DEFAULT_EXPERIMENT
            sinks.append(MlflowSink(rest, experiment, name, warnings))
        except ValueError as exc:
            warnings.failed("mlflow", "starting", exc)
    if wandb_tracking.enabled(environ):
        where = logdir.parent if logdir is not None else None  # beside the event files
        try:
            sinks.append(wandb_tracking.WandbSink(environ, name, where, warnings))
        except ImportError as exc:  # an image without the extra
            warnings.failed("wandb", "starting (the image needs the `wandb` extra)", exc)
    if not sinks:
        return None
    tags = {"job_name": name, **({"image": environ[ENV_IMAGE]} if environ.get(ENV_IMAGE) else {})}
    return Tracking(sinks, flat_params(config), tags, warnings)
