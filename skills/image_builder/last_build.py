"""The image build_image last built in a project, kept in the tool state so that
`push_to_ecr --repository R` with no --image pushes it (the seed document's call). Keyed
by the project folder (the build's working directory); an explicit image always wins.

    <state dir>/last_build/<hash of the project folder>.json   {"project", "image", "built_at"}
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, ValidationError

from skills.operations.operations import state_dir
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.files import atomic_write_text
from skills.shared.paths import working_dir
from skills.shared.reading import read_text

MAX_RECORD_BYTES = 64 * 1024


class LastBuild(BaseModel):
    project: str
    image: str
    built_at: str


def _path(project: Path) -> Path:
    key = hashlib.sha256(str(project.resolve()).encode()).hexdigest()[:24]
    return state_dir() / "last_build" / f"{key}.json"


def remember(image: str, project: Path | None = None) -> None:
    """Record the image just built. Best effort: a state folder that cannot be written
    costs only the default, never the build that succeeded."""
    project = (project or working_dir()).resolve()
    record = LastBuild(
        project=str(project),
        image=image,
        built_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    try:
        path = _path(project)
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, record.model_dump_json(indent=2) + "\n")
    except OSError:
        pass


def recall(project: Path | None = None) -> LastBuild | None:
    """The project's last built image, or None (never built here, unreadable, invalid)."""
    project = (project or working_dir()).resolve()
    try:
        text = read_text(
            _path(project), what="build record", max_bytes=MAX_RECORD_BYTES, follow_links=False
        )
        record = LastBuild.model_validate_json(text)
    except (ToolFailure, ValidationError):
        return None
    return record if record.project == str(project) else None


def required_image() -> str:
    """The image to push when none is given: the last build here, else invalid_input."""
    built = recall()
    if built is None:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            "No image given, and build_image has built none in this project.",
            "Pass image (a local image ref), or build one first with build_image.",
            {"problems": [{"field": "image", "problem": "missing"}]},
        )
    return built.image
