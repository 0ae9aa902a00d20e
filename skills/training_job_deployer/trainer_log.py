"""Reads the trainer's JSON metric lines (one object per line, key "event"), so
status and progress never depend on scraping free text."""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from skills.shared.progress import Progress
from skills.shared.secrets import redact
from skills.training_job_deployer.loss_curve import Thinned, sparkline
from trainer.rules import EXIT_PREEMPTED

# Losses kept for the summary's sparkline (thinned uniformly over the whole run).
SPARK_POINTS = 64


def parse_line(line: str) -> dict[str, Any] | None:
    """The event on this line, or None for anything that is not a trainer event."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        event = json.loads(text)
    except json.JSONDecodeError:
        return None
    return event if isinstance(event, dict) and isinstance(event.get("event"), str) else None


def parse_events(text: str) -> list[dict[str, Any]]:
    """Every trainer event in `text` (whole lines), in order."""
    return [event for event in map(parse_line, text.splitlines()) if event is not None]


def tail_with_error(tail: str | None, error: dict[str, Any] | None) -> str | None:
    """A failed job's log tail that shows the trainer's error: when what came after it
    (torchrun's own traceback once the ranks were stopped, other ranks' teardown) pushed
    the error line out of the tail, the error leads, then the tail."""
    if tail is None or not error or not error.get("message") or str(error["message"]) in tail:
        return tail
    line = f"{error.get('error_type') or 'error'}: {error['message']}"
    return f"{line}\n[...]\n{tail}"


# Step lines of an attempt kept for the watchdog (watchdog.py): its first ones (warm-up,
# then the job's own baseline) and its most recent ones.
FIRST_STEP_LINES = 8
RECENT_STEP_LINES = 64


@dataclass
class RunMetrics:
    """What the events of one run add up to. A `start` after torchrun restarted the
    workers begins a new attempt: the outcome (summary, error, preempted) is that of
    the last attempt; losses and checkpoints carry over."""

    max_steps: int | None = None
    world_size: int | None = None
    steps: int = 0
    first_loss: float | None = None
    last_loss: float | None = None
    tokens_per_s: float | None = None
    last_eval_loss: float | None = None
    resumed_from: int | None = None
    checkpoint_step: int | None = None
    checkpoint_path: str | None = None
    skipped_checkpoints: list[str] = field(default_factory=list)
    preempted: dict[str, Any] | None = None
    summary: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    tracking: dict[str, str] | None = None  # the trainer's `tracking` line: where the run is
    last_event: dict[str, Any] | None = field(default=None, repr=False)
    # The current attempt's: its start line, first and latest step lines, longest save.
    start: dict[str, Any] | None = field(default=None, repr=False)
    first_steps: list[dict[str, Any]] = field(default_factory=list, repr=False)
    recent_steps: deque[dict[str, Any]] = field(
        default_factory=lambda: deque(maxlen=RECENT_STEP_LINES), repr=False
    )
    longest_save_s: float = 0.0
    losses: Thinned = field(default_factory=lambda: Thinned(SPARK_POINTS), repr=False)

    def add(self, event: dict[str, Any]) -> None:
        kind = event["event"]
        self.last_event = event
        if kind == "start":
            self.max_steps = event.get("max_steps", self.max_steps)
            self.world_size = event.get("world_size", self.world_size)
            self.summary = self.error = self.preempted = None
            self.start, self.first_steps, self.longest_save_s = event, [], 0.0
            self.recent_steps.clear()
            if event.get("resumed_from") is not None:
                self.resumed_from = int(event["resumed_from"])
                self.steps = max(self.steps, self.resumed_from)
        elif kind == "step":
            self.steps = int(event["step"])
            if self.first_loss is None:
                self.first_loss = float(event["loss"])
            self.last_loss = float(event["loss"])
            self.losses.add(self.steps, self.last_loss)
            self.tokens_per_s = float(event.get("tokens_per_s") or 0.0)
            if len(self.first_steps) < FIRST_STEP_LINES:
                self.first_steps.append(event)
            self.recent_steps.append(event)
        elif kind == "eval":
            self.last_eval_loss = _float(event.get("loss"))
        elif kind == "checkpoint_saved":
            self.checkpoint_step = int(event["step"])
            self.checkpoint_path = event.get("path")
            self.longest_save_s = max(self.longest_save_s, float(event.get("blocked_s") or 0.0))
        elif kind == "checkpoint_loaded":
            self.resumed_from = int(event["step"])
        elif kind == "checkpoint_skipped":
            self.skipped_checkpoints.append(str(event.get("path")))
        elif kind == "preempted":
            self.preempted = event
            if event.get("checkpoint") and self.checkpoint_path != event["checkpoint"]:
                self.checkpoint_path, self.checkpoint_step = event["checkpoint"], event.get("step")
        elif kind == "summary":
            self.summary = event
            self.steps = int(event.get("steps", self.steps))
            self.tokens_per_s = event.get("tokens_per_s", self.tokens_per_s)
            if event.get("last_eval_loss") is not None:
                self.last_eval_loss = _float(event["last_eval_loss"])
            if event.get("resumed_from") is not None:
                self.resumed_from = int(event["resumed_from"])
            if event.get("checkpoint") and self.checkpoint_path is None:
                self.checkpoint_path = event["checkpoint"]
        elif kind == "error":
            self.error = event
        elif kind == "tracking":
            self.tracking = {k: str(v) for k, v in event.items() if k != "event"}

    def state_fields(self) -> dict[str, Any]:
        """The JobState fields these events give, the same on every target; the error
        line's strings masked."""
        elapsed = (self.summary or {}).get("elapsed_s")
        if elapsed is None and self.last_event:
            elapsed = self.last_event.get("elapsed_s")
        error = None
        if self.error is not None:
            error = {k: redact(v) if isinstance(v, str) else v for k, v in self.error.items()}
        return {
            "steps": self.steps,
            "max_steps": self.max_steps,
            "first_loss": self.first_loss,
            "last_loss": self.last_loss,
            "tokens_per_s": self.tokens_per_s,
            "world_size": self.world_size,
            "last_eval_loss": self.last_eval_loss,
            "resumed_from": self.resumed_from,
            "checkpoint_step": self.checkpoint_step,
            "checkpoint_path": self.checkpoint_path,
            "elapsed_s": elapsed,
            "error": error,
            "tracking": self.tracking,
            "loss_sparkline": sparkline(self.losses.values) or None,
            "gpu": self._gpu(),
        }

    def _gpu(self) -> dict[str, Any] | None:
        """The last step line's gpu_* fields (trainer/gpu_telemetry.py), if it has any."""
        last = self.recent_steps[-1] if self.recent_steps else {}
        return {k: v for k, v in last.items() if k.startswith("gpu_")} or None

    def progress_message(self) -> str:
        if self.last_loss is None:
            return f"resumed from step {self.resumed_from}" if self.resumed_from else "starting"
        rate = f" · {self.tokens_per_s:,.0f} tok/s" if self.tokens_per_s else ""
        return f"loss {self.last_loss:.4f}{rate}"

    def outcome(self, exit_code: int | None) -> str | None:
        """One line on how a finished run that did not succeed ended (None: it succeeded)."""
        if self.preempted is not None or exit_code == EXIT_PREEMPTED:
            saved = self.preempted is None or self.preempted.get("checkpoint")
            if saved and self.checkpoint_step is not None:
                return (
                    f"preempted: checkpoint saved at step {self.checkpoint_step}; "
                    "re-run the same job to resume"
                )
            at = f" at step {self.preempted['step']}" if self.preempted else ""
            if self.resumed_from:
                return (
                    f"preempted{at} without a new checkpoint; re-running the same job resumes "
                    f"from step {self.resumed_from}"
                )
            return f"preempted{at} without a checkpoint; a re-run starts over"
        if self.error is not None:
            return f"failed: {self.error.get('error_type')}: {self.error.get('message')}"
        code = "" if exit_code is None else f" with exit code {exit_code}"
        if self.summary is None:
            return f"failed: the trainer stopped{code} before its summary line; see the log tail"
        if exit_code not in (0, None):
            return f"failed: the job exited{code} after the trainer's summary; see the log tail"
        return None


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass
class LogFollower:
    """A log read in chunks as it grows: whole lines become events in `metrics`, with
    one progress report per start or step; a partial last line waits for its newline
    (or for `final`, when no more will come)."""

    metrics: RunMetrics = field(default_factory=RunMetrics)
    pending: bytes = b""
    resync: bool = False  # after a skip: drop bytes up to the next newline

    def skip(self, at_line_start: bool = False) -> None:
        """The reader jumps over the middle of a long log to its tail: a partial line is
        dropped (the next chunk's text up to its first newline too, unless it starts at
        a line's start), and so is what the head alone said of the outcome (a summary,
        error or preemption there was followed by more log, so it was not the run's
        last word; the tail's own events decide again)."""
        self.pending, self.resync = b"", not at_line_start
        self.metrics.summary = self.metrics.error = self.metrics.preempted = None

    def feed(self, chunk: bytes, progress: Progress | None = None, final: bool = False) -> None:
        if self.resync:
            cut = chunk.find(b"\n")
            if cut < 0:
                return
            chunk, self.resync = chunk[cut + 1 :], False
        complete, _, self.pending = (self.pending + chunk).rpartition(b"\n")
        if final and self.pending:  # the last line may lack its newline
            complete, self.pending = complete + b"\n" + self.pending, b""
        for event in parse_events(complete.decode("utf-8", errors="replace")):
            self.metrics.add(event)
            if progress is not None and event["event"] in ("start", "step"):
                m = self.metrics
                progress.report(m.steps, m.max_steps, m.progress_message())


@dataclass(frozen=True)
class StepTime:
    """Seconds per optimizer step, measured between the first and last step lines of
    one attempt (so the first step's compile and warm-up are left out)."""

    seconds: float
    steps: int  # the steps the measurement spans
    world_size: int | None


def measured_step_time(text: str) -> StepTime | None:
    """The step time of the last attempt in `text` (a job's log) that logged two or more
    steps with their elapsed time; None when none did."""
    attempts: list[tuple[int | None, list[dict[str, Any]]]] = [(None, [])]
    for event in parse_events(text):
        if event["event"] == "start":
            attempts.append((event.get("world_size"), []))
        elif event["event"] == "step" and event.get("elapsed_s") is not None:
            attempts[-1][1].append(event)
    for world_size, steps in reversed(attempts):
        if len(steps) < 2:
            continue
        first, last = steps[0], steps[-1]
        spanned = int(last["step"]) - int(first["step"])
        seconds = (float(last["elapsed_s"]) - float(first["elapsed_s"])) / max(spanned, 1)
        if spanned > 0 and seconds > 0:
            return StepTime(seconds, spanned, world_size)
    return None
