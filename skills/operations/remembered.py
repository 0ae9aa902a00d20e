"""The ECR repository this user's tools last published to, kept in the tool state so a
deploy that names no image finds the one push_to_ecr (or setup_codebuild's project)
just put there. An explicit `repository` or ECR_REPOSITORY always wins; this is only
the default when neither is set.

    <state dir>/ecr_repository.json   {"repository", "region", "recorded_by", "recorded_at"}
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, ValidationError

from skills.operations.operations import state_dir
from skills.shared.errors import ToolFailure
from skills.shared.files import atomic_write_text
from skills.shared.reading import load_json

FILE_NAME = "ecr_repository.json"
# The names ECR accepts (a record edited by hand is ignored unless it is one).
_NAME = re.compile(r"(?:[a-z0-9]+(?:[._-][a-z0-9]+)*/)*[a-z0-9]+(?:[._-][a-z0-9]+)*")
_REGION = re.compile(r"[a-z]{2}(?:-[a-z]+)+-\d")


class RememberedRepository(BaseModel):
    repository: str
    region: str
    recorded_by: str  # the tool that used it: push_to_ecr, setup_codebuild
    recorded_at: str


def _path() -> Path:
    return state_dir() / FILE_NAME


def remember(repository: str, region: str, recorded_by: str) -> None:
    """Record the repository a tool just used. Best effort: a state directory that
    cannot be written costs only the default, never the push that succeeded."""
    record = RememberedRepository(
        repository=repository,
        region=region,
        recorded_by=recorded_by,
        recorded_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    try:
        path = _path()
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, record.model_dump_json(indent=2) + "\n")
    except (OSError, ToolFailure):  # a link in its place is not written through either
        pass


def recall() -> RememberedRepository | None:
    """The last recorded repository, or None (never recorded, unreadable, not valid). Read
    by the bounded reader: a link, a FIFO, a device or a deep document in its place is
    not a record (no hang, no MemoryError, no RecursionError)."""
    try:
        data = load_json(_path(), what="repository record", max_bytes=64 * 1024, follow_links=False)
        record = RememberedRepository.model_validate(data)
    except (ToolFailure, ValidationError):
        return None
    if not (_NAME.fullmatch(record.repository) and _REGION.fullmatch(record.region)):
        return None
    return record
