"""Progress on the TrainJob object: rank 0 posts it to Kubeflow Trainer v2's status server.

Since Trainer v2.2 (`TrainJobStatus` feature gate) the controller injects three
variables into the trainer containers (upstream v2.3.0,
pkg/runtime/framework/plugins/trainjobstatus/trainjobstatus.go): the status URL, the
server's CA file and a projected ServiceAccount token file that the kubelet rotates.
A POST there with a bearer token writes `TrainJob.status.trainerStatus` (progress
percentage, estimated remaining seconds, metrics), so tools read progress from the
object instead of the logs.

Watching the trainer's own event stream (the step lines it prints anyway), this module
posts at most every MIN_INTERVAL_S and once more at the end. Posting never touches the
training thread's time: a daemon thread sends the newest snapshot (a mailbox of one;
an older unsent one is dropped), re-reads the token and the CA for each post, gives up
after POST_TIMEOUT_S, and a failure is counted and told once on stderr, never raised.
Without the variables (any other target, or rank > 0) nothing is created at all.
Stdlib only (http.client + ssl): the trainer image must not grow for this.
"""

from __future__ import annotations

import datetime
import http.client
import json
import math
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from trainer.warn_once import FirstFailures

ENV_URL = "KUBEFLOW_TRAINER_SERVER_URL"
ENV_CA_CERT = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
ENV_TOKEN = "KUBEFLOW_TRAINER_SERVER_TOKEN"
# Upstream's guidance for clients (docs/user-guides/trainjob-progress.md; the Kubeflow
# SDK throttles the same way): at most one update every 5 s.
MIN_INTERVAL_S = 5.0
POST_TIMEOUT_S = 2.0
# Who a failed post's one stderr line names (warn_once.py).
WARN_SOURCE = "trainer status"
# At the end: how long the process waits for the final post to go out.
FINAL_WAIT_S = POST_TIMEOUT_S + 1.0
# The step line's fields posted as metrics, under the same names.
METRICS = ("step", "loss", "tokens_per_s", "mfu")
METRIC_VALUE_MAX = 64  # the CRD's maxLength for a metric value

Emit = Callable[..., None]
Clock = Callable[[], float]


@dataclass(frozen=True)
class Endpoint:
    url: str
    ca_file: str
    token_file: str

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Endpoint | None:
        """The status server the controller named, or None (all three are needed)."""
        url, ca, token = (environ.get(k, "") for k in (ENV_URL, ENV_CA_CERT, ENV_TOKEN))
        if not (url and ca and token):
            return None
        return cls(url, ca, token)


def _metric_value(value: Any) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return str(value)[:METRIC_VALUE_MAX]


def trainer_status(
    step: int,
    max_steps: int,
    step_s: float | None,
    fields: Mapping[str, Any],
    now: datetime.datetime,
) -> dict[str, Any]:
    """The request body for `step` of `max_steps`: progress (whole percent, 100 only at
    the end), seconds left at the recent step time, and the METRICS the step line has
    (a metric without a value, e.g. MFU on a CPU, is left out: values must not be empty)."""
    status: dict[str, Any] = {}
    if max_steps > 0:
        status["progressPercentage"] = max(0, min(100, step * 100 // max_steps))
        if step_s is not None and math.isfinite(step_s) and step_s >= 0:
            status["estimatedRemainingSeconds"] = round(max(0, max_steps - step) * step_s)
    metrics = []
    for name in METRICS:
        value = _metric_value(fields.get(name))
        if value is not None:
            metrics.append({"name": name, "value": value})
    status["metrics"] = metrics
    status["lastUpdatedTime"] = now.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"trainerStatus": status}


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


class StatusPoster:
    """Sends bodies to the endpoint from a daemon thread, the newest only, throttled to
    one per `interval` seconds of `clock` except a final one."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        clock: Clock = time.monotonic,
        interval: float = MIN_INTERVAL_S,
        timeout: float = POST_TIMEOUT_S,
        log: TextIO | None = None,
    ) -> None:
        self.endpoint, self.clock, self.interval, self.timeout = endpoint, clock, interval, timeout
        self.sent = 0  # posts the server accepted
        self.warnings = FirstFailures(log)
        self._last_offer: float | None = None
        self._pending: dict[str, Any] | None = None
        self._busy = False
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="trainer-status", daemon=True)
        self._thread.start()

    def offer(self, body: dict[str, Any], *, final: bool = False) -> bool:
        """Hand `body` to the sender unless one was handed less than `interval` ago (a
        final one always goes). Never blocks on the network; True when taken."""
        now = self.clock()
        if not final and self._last_offer is not None and now - self._last_offer < self.interval:
            return False
        self._last_offer = now
        with self._cond:
            self._pending = body  # replaces one not yet sent: only the newest matters
            self._cond.notify_all()
        return True

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds until everything offered was sent (or failed)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending is not None or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def close(self, wait: float = FINAL_WAIT_S) -> None:
        """Wait up to `wait` seconds for what was offered to be sent, then stop the
        thread (one still posting ends with its timeout; it is a daemon either way)."""
        self.wait_idle(wait)
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                body = self._pending
                if self._closed or body is None:
                    return
                self._pending, self._busy = None, True
            try:
                self._post(body)
                self.sent += 1
            except Exception as exc:  # noqa: BLE001 (progress must never stop training)
                self._failed(exc)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _post(self, body: dict[str, Any]) -> None:
        ep = self.endpoint
        # Both re-read for every post: the token rotates (an hour's life), the CA can too.
        with open(ep.token_file) as f:
            token = f.read().strip()
        context = ssl.create_default_context(cafile=ep.ca_file)
        url = urllib.parse.urlsplit(ep.url)
        if url.scheme != "https" or not url.hostname:
            raise ValueError(f"{ENV_URL} is not an https URL")
        # http.client, not urllib: a redirect is not followed, so the token goes to the
        # server the controller named and nowhere else.
        conn = http.client.HTTPSConnection(
            url.hostname, url.port, context=context, timeout=self.timeout
        )
        try:
            data = json.dumps(body).encode()
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
            conn.request("POST", url.path, body=data, headers=headers)
            response = conn.getresponse()
            answer = response.read(4096)
        finally:
            conn.close()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {_status_message(answer)}")

    @property
    def failures(self) -> int:
        return self.warnings.counts.get(WARN_SOURCE, 0)

    def _failed(self, exc: BaseException) -> None:
        self.warnings.failed(WARN_SOURCE, f"posting progress to {self.endpoint.url}", exc)


def _status_message(answer: bytes) -> str:
    """The message of the server's metav1.Status, else the start of the body."""
    try:
        return str(json.loads(answer)["message"])[:200]
    except (ValueError, KeyError, TypeError):
        return answer[:200].decode(errors="replace")


class ProgressReporter:
    """Watches the trainer's events (`observe(emit)`): offers a snapshot on each step line
    (the poster throttles them) and, on the summary, the last step unthrottled unless
    that one was already handed over."""

    def __init__(self, poster: StatusPoster, now: Callable[[], datetime.datetime] = _utc_now):
        self.poster, self.now = poster, now
        self.max_steps = 0
        self.last: dict[str, Any] | None = None  # the newest step line
        self.offered_step: int | None = None  # the step of the newest body handed over

    def observe(self, emit: Emit) -> Emit:
        def emit_and_report(event: str, **fields: Any) -> None:
            emit(event, **fields)
            self.on_event(event, fields)

        return emit_and_report

    def on_event(self, event: str, fields: dict[str, Any]) -> None:
        if event == "start":
            self.max_steps = int(fields.get("max_steps") or 0)
        elif event == "step":
            self.last = fields
            if self.poster.offer(self._body(fields)):
                self.offered_step = fields["step"]
        elif event == "summary":  # the end, finished or preempted: its step goes out
            step = fields.get("steps")
            last = dict(self.last or {})
            if step is not None and last.get("step") != step:
                last = {"step": step}  # no step line for it (a resumed, finished run)
            if last and last["step"] != self.offered_step:
                self.poster.offer(self._body(last), final=True)
                self.offered_step = last["step"]

    def _body(self, fields: Mapping[str, Any]) -> dict[str, Any]:
        return trainer_status(
            int(fields["step"]), self.max_steps, fields.get("step_s"), fields, self.now()
        )

    def close(self) -> None:
        self.poster.close()


def from_environ(environ: Mapping[str, str], rank: int) -> ProgressReporter | None:
    """A reporter when this is rank 0 and the controller named its status server, else
    None: then nothing is created (no thread, no file read)."""
    if rank != 0:
        return None
    endpoint = Endpoint.from_environ(environ)
    if endpoint is None:
        return None
    return ProgressReporter(StatusPoster(endpoint))
