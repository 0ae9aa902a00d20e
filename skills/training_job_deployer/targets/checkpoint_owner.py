"""A local checkpoint directory belongs to one job: a re-run of that job resumes from
it, another job may only take it over when told to (it would resume from, and prune,
that job's checkpoints). The owner is the run directory named in a marker file."""

from __future__ import annotations

import os
from pathlib import Path

from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.files import atomic_write_text
from skills.shared.reading import ReadRefused, read_text

OWNER_FILE = ".fsdp-eks-owner"


def owner_of(checkpoint_dir: Path) -> str | None:
    """The owner the marker names; None when there is none. Read by the bounded reader:
    a link, FIFO or device in the marker's place is refused (typed), never followed."""
    try:
        text = read_text(
            checkpoint_dir / OWNER_FILE,
            what="checkpoint owner marker",
            max_bytes=64 * 1024,
            follow_links=False,
            errors="replace",
        )
    except ReadRefused as refused:
        if refused.code == ErrorCode.NOT_FOUND or refused.problem.startswith("cannot be read"):
            return None  # no marker (or no directory yet)
        raise
    return text.strip() or None


def check_owner(checkpoint_dir: Path, run_dir: Path, adopt: bool) -> None:
    """Raise conflict when another job owns the directory and `adopt` is not set."""
    owner = owner_of(checkpoint_dir)
    if owner is None or owner == str(run_dir) or adopt:
        return
    raise ToolFailure(
        ErrorCode.CONFLICT,
        f"checkpoint_dir {checkpoint_dir} belongs to the job in {owner}: this job would "
        "resume from its checkpoints and prune them.",
        "Leave checkpoint_dir unset (each job gets its own) or pick a new directory; to "
        "continue from that job's checkpoints on purpose, pass --adopt_checkpoint_dir "
        "(MCP: adopt_checkpoint_dir=true) and do not run that job again with it.",
        {"checkpoint_dir": str(checkpoint_dir), "owner": owner},
    )


def claim(checkpoint_dir: Path, run_dir: Path, adopt: bool) -> None:
    """Make `run_dir` the owner: the first job to claim a new directory wins a race
    (the marker is created exclusively); another owner needs `adopt`."""
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    marker = checkpoint_dir / OWNER_FILE
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        check_owner(checkpoint_dir, run_dir, adopt)
        if owner_of(checkpoint_dir) != str(run_dir):
            atomic_write_text(marker, str(run_dir), mode=0o644)
        return
    with os.fdopen(fd, "w") as out:
        out.write(str(run_dir))
