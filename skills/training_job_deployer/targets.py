"""Targets by name; each has plan -> submit -> describe/follow -> logs -> cancel."""

from __future__ import annotations

from pathlib import Path

from skills.training_job_deployer.local_target import LocalTarget


def get_target(name: str, runs_dir: str | Path = "runs") -> LocalTarget:
    if name == "local":
        return LocalTarget(runs_dir)
    # Unreachable through the tools (their Target type admits only known names).
    raise ValueError(f"unknown target {name!r}")
