"""Marks the tool inputs that name local paths, so every rule about paths (where a
target resolves them, where an MCP caller may point them) finds them in one way."""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from pydantic import BaseModel

# Where the caller's relative paths and a tool's project defaults (./Dockerfile, the
# project of the last build, its git remote) start. An MCP server sets its session's
# workspace root for each call (one process serves many sessions, so never its cwd);
# unset for the CLI and in-process callers, whose project is their working directory.
WORKING_DIR: ContextVar[Path | None] = ContextVar("working_dir", default=None)


def working_dir() -> Path:
    """The caller's project directory: the MCP session's workspace, else the cwd."""
    return WORKING_DIR.get() or Path.cwd()


def absolute(value: str | Path) -> Path:
    """`value` (~ expanded) as an absolute path, a relative one under working_dir()."""
    return working_dir() / Path(value).expanduser()


@dataclass(frozen=True)
class LocalPath:
    """A field whose value may be a local path. s3:// URIs are not local paths;
    `hub_name`: the value may also be a Hugging Face hub name (no '/' prefix, not
    starting with '.' or '~', and not an existing path). `writable`: the tool may
    write there, so an MCP caller must keep it inside the server's workspace; left
    unsaid, a field that may be a hub name is an input and any other is taken as
    written (the stricter reading)."""

    hub_name: bool = False
    writable: bool | None = None
    # The field also takes an s3:// URI (what a refusal's hint may offer).
    s3: bool = False
    # The field also takes pvc:<claim>/<path>: a path in a cluster's volume claim.
    claim: bool = False
    # Read or written where the job runs: a path on this host only when the call's
    # settings say the job runs here (see `runs_here`); elsewhere it names a path on
    # the cluster, which no rule about this host's paths applies to.
    where_job_runs: bool = False
    # A file the tool reads, and writes beside or over only when one of these boolean
    # arguments is true (build_image's Dockerfile: `.fixed` with auto_fix, in place with
    # write): with all of them false it is a read path. See `for_call`.
    written_with: tuple[str, ...] = ()

    @property
    def may_write(self) -> bool:
        return (not self.hub_name) if self.writable is None else self.writable

    def for_call(self, arguments: BaseModel) -> LocalPath:
        """This marker as one call's arguments settle it: `written_with` decides whether
        the tool writes there."""
        if not self.written_with:
            return self
        writes = any(getattr(arguments, name, False) is True for name in self.written_with)
        return replace(self, writable=writes, written_with=())


@cache
def path_fields(model: type[BaseModel]) -> dict[str, LocalPath]:
    """The fields of `model` marked LocalPath, in field order."""
    return {
        name: marker
        for name, info in model.model_fields.items()
        for marker in info.metadata
        if isinstance(marker, LocalPath)
    }


def runs_here(models: list[BaseModel]) -> bool:
    """False when one of a call's models (a target's settings) says the job runs on
    another machine (`job_runs_here`), so its `where_job_runs` paths are not this host's."""
    return all(getattr(m, "job_runs_here", True) for m in models)


# The user's project, named by whoever starts a tool (the MCP server's --workspace too).
WORKSPACE_ENV = "FSDP_EKS_WORKSPACE"


def project_root(start: Path, environ: Mapping[str, str] = os.environ) -> Path:
    """The one rule the CLI and the MCP server share for where the user's project is
    (its runs/, its relative paths): WORKSPACE_ENV, else the git root above `start`,
    else `start`, whatever subfolder a command starts in."""
    named = environ.get(WORKSPACE_ENV)
    start = (start / named).expanduser().resolve() if named else start.resolve()
    if named:
        return start
    for folder in (start, *start.parents):
        if (folder / ".git").exists():  # a folder, or a worktree's file
            return folder
    return start
