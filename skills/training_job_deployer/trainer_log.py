"""Reads the trainer's JSON metric lines (one object per line, key "event"), so
status and progress never depend on scraping free text."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


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


@dataclass
class RunMetrics:
    """What the events of one run add up to."""

    max_steps: int | None = None
    world_size: int | None = None
    steps: int = 0
    first_loss: float | None = None
    last_loss: float | None = None
    tokens_per_s: float | None = None
    summary: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    last_event: dict[str, Any] | None = field(default=None, repr=False)

    def add(self, event: dict[str, Any]) -> None:
        kind = event["event"]
        self.last_event = event
        if kind == "start":
            self.max_steps = event.get("max_steps", self.max_steps)
            self.world_size = event.get("world_size", self.world_size)
        elif kind == "step":
            self.steps = int(event["step"])
            if self.first_loss is None:
                self.first_loss = float(event["loss"])
            self.last_loss = float(event["loss"])
            self.tokens_per_s = float(event.get("tokens_per_s") or 0.0)
        elif kind == "summary":
            self.summary = event
            self.steps = int(event.get("steps", self.steps))
            self.tokens_per_s = event.get("tokens_per_s", self.tokens_per_s)
        elif kind == "error":
            self.error = event

    def progress_message(self) -> str:
        if self.last_loss is None:
            return "starting"
        rate = f" · {self.tokens_per_s:,.0f} tok/s" if self.tokens_per_s else ""
        return f"loss {self.last_loss:.4f}{rate}"
