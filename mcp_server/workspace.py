"""Where an MCP caller's paths may point. The MCP server holds one Workspace and checks
every call against it before the tool runs; the CLI and Python callers own the machine
and are not confined. Tools mark their path inputs with `LocalPath` (paths.py).

A marked value is allowed when it is an s3:// URI, a hub name (fields that take one),
or a path that resolves (~ expanded, relative to the workspace root, symlinks
followed) inside the workspace root, or, for a field the tool only reads, inside one
of the extra read roots (`--allow-path`). The workspace is the user's project: the
server's --workspace (or FSDP_EKS_WORKSPACE); with neither, the client's first root
(roots/list, asked once per client session: each session has its own) else the git
root above the directory the server starts in, else that directory
(skills.shared.paths.project_root: the CLI's rule too). A relative path, given or a
tool's default (runs_dir "runs"), reaches the tool as that path under the root, so
nothing lands beside the checkout the package came from."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.paths import WORKSPACE_ENV, LocalPath, path_fields, project_root, runs_here

if TYPE_CHECKING:
    from skills.shared.tooling import ToolSpec

ALLOW_PATHS_ENV = "FSDP_EKS_ALLOW_PATHS"
# With no --workspace: the git root above the server's directory, else that directory (a
# client starts it in its project), unless the client names its project as a root.
DEFAULT_WORKSPACE = "the git root, else the directory it starts in"

# A hub id is one or two names; each starts with a letter or digit, so no '.'/'..' part.
_HUB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
# A bucket and a key with no '.' or '..' part: some tools read such a value as a path.
_S3_URI = re.compile(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/(?!\.\.?(/|$))[^/]*)*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Workspace:
    """The writable root and the extra read-only roots. `chosen`: the server's owner
    named the root (--workspace); otherwise a client's roots may name it instead."""

    root: Path
    read_roots: tuple[Path, ...] = ()
    chosen: bool = True

    @property
    def base(self) -> Path:
        """Where relative paths start: the project's root, never the server's checkout."""
        return self.root

    @classmethod
    def create(
        cls,
        root: str | None = None,
        allow: Iterable[str] = (),
        environ: Mapping[str, str] = os.environ,
    ) -> Workspace:
        """From the server's flags, else its environment, else the directory here."""
        here = Path.cwd()
        named = root or environ.get(WORKSPACE_ENV)
        allow = list(allow) or environ.get(ALLOW_PATHS_ENV, "").split(os.pathsep)
        return cls(
            root=_resolve(named, here) if named else project_root(here, {}),
            read_roots=tuple(_resolve(a, here) for a in allow if a),
            chosen=bool(named),
        )

    def at(self, root: Path) -> Workspace:
        """This workspace moved to the client's project `root` (its read roots kept)."""
        return replace(self, root=root.resolve(), chosen=True)

    def describe(self) -> str:
        """One sentence for the server's instructions: where paths may point."""
        text = f"Local paths must lie under the workspace {self.root}"
        if self.read_roots:
            text += " (inputs also under " + ", ".join(map(str, self.read_roots)) + ")"
        return text + "; s3:// URIs and hub names are fine."

    def confine(
        self, spec: ToolSpec, args: BaseModel, arguments: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The call's arguments once every marked path in them is allowed, or
        ToolFailure(PATH_NOT_ALLOWED). Every relative local path, given or left at its
        default (runs_dir "runs"), is passed on as that path under the root. A written
        path left at a default that lies outside becomes the workspace root: the caller
        did not ask for that place. A file the tool reads (a Dockerfile) is never swapped
        for a directory: outside, it is refused like a given one."""
        confined = dict(arguments)
        for name, marker, value, given, owner in _marked_values(spec, args):
            if not isinstance(value, str):
                continue
            settled = marker.for_call(owner)
            place_to_write = marker.may_write and not marker.written_with
            if not given and place_to_write and not self._allows(name, value, settled):
                confined[name] = str(self.root)
                continue
            self.check(name, value, settled)
            if self._is_relative_path(value, settled):
                confined[name] = str(self.root / value)
        return confined

    def check(self, name: str, value: str, marker: LocalPath) -> None:
        """Raises ToolFailure(PATH_NOT_ALLOWED) unless `value` may go in field `name`."""
        if not value or _CONTROL.search(value):
            what = "is empty" if not value else "holds control characters"
            raise ToolFailure(
                ErrorCode.PATH_NOT_ALLOWED,
                f"{name} {what}.",
                self._hint(marker),
                {"field": name, "roots": self._roots(marker)},
            )
        if value.startswith("s3://"):
            if _S3_URI.fullmatch(value):
                return
            # A tool would take it for a URI whose key walks up ('..'), not for a path.
            raise ToolFailure(
                ErrorCode.PATH_NOT_ALLOWED,
                f"{name}: {value!r} is not an s3:// URI a tool may use (a bucket, then a key "
                "with no '.' or '..' part).",
                self._hint(marker),
                {"field": name, "roots": self._roots(marker)},
            )
        if marker.hub_name and self._is_hub_name(value):
            return
        if marker.claim and value.startswith("pvc:"):
            return  # on the cluster: no path of this host
        path = self._resolve_or_refuse(name, value, marker)
        if not any(path.is_relative_to(root) for root in self._roots_of(marker)):
            raise self._refusal(name, path, marker)

    # --------------------------------------------------------------------------

    def _allows(self, name: str, value: str, marker: LocalPath) -> bool:
        try:
            self.check(name, value, marker)
        except ToolFailure:
            return False
        return True

    def _is_relative_path(self, value: str, marker: LocalPath) -> bool:
        if value.startswith(("s3://", "~")) or Path(value).is_absolute():
            return False
        if marker.claim and value.startswith("pvc:"):
            return False
        return not (marker.hub_name and self._is_hub_name(value))

    def _is_hub_name(self, value: str) -> bool:
        # The tools' own rule (local_path): not '.'/'~'-led and not an existing path.
        if not _HUB_NAME.fullmatch(value):
            return False
        try:
            return not (self.base / value).exists()
        except OSError:
            return False

    def _resolve_or_refuse(self, name: str, value: str, marker: LocalPath) -> Path:
        try:
            return _resolve(value, self.base)
        except (OSError, RuntimeError, ValueError):  # ~nobody, a name too long
            raise ToolFailure(
                ErrorCode.PATH_NOT_ALLOWED,
                f"{name} cannot be resolved to a path on the server.",
                self._hint(marker),
                {"field": name, "roots": self._roots(marker)},
            ) from None

    def _roots_of(self, marker: LocalPath) -> tuple[Path, ...]:
        return (self.root,) if marker.may_write else (self.root, *self.read_roots)

    def _roots(self, marker: LocalPath) -> list[str]:
        return [str(root) for root in self._roots_of(marker)]

    def _hint(self, marker: LocalPath) -> str:
        """What the field does take: a path under the workspace, and an s3:// URI or a
        hub name only where the field takes one."""
        others = [
            text
            for text, takes in (
                ("an s3:// URI", marker.s3),
                ("a hub name", marker.hub_name),
                ("pvc:<claim>/<path>", marker.claim),
            )
            if takes
        ]
        if marker.may_write:
            alternatives = f", or {' or '.join(others)}" if others else ""
            return (
                f"The tool writes there: use a path under the workspace {self.root} "
                f"(the server's --workspace DIR or {WORKSPACE_ENV} sets it){alternatives}."
            )
        alternatives = "".join(f", {text}" for text in others)
        return (
            f"Use a path under the workspace {self.root}{alternatives}, or start the server "
            f"with --allow-path DIR (or {ALLOW_PATHS_ENV}) to let it read DIR."
        )

    def _refusal(self, name: str, path: Path, marker: LocalPath) -> ToolFailure:
        read_only = marker.may_write and any(path.is_relative_to(r) for r in self.read_roots)
        where = (
            "is under a read-only root, and the tool writes there"
            if read_only
            else "is outside the roots this server allows"
        )
        return ToolFailure(
            ErrorCode.PATH_NOT_ALLOWED,
            f"{name}: {path} {where} (allowed: {', '.join(self._roots(marker))}).",
            self._hint(marker),
            {"field": name, "path": str(path), "roots": self._roots(marker)},
        )


def _resolve(value: str, base: Path) -> Path:
    # Path.resolve follows symlinks, so a link inside a root cannot lead out of it.
    return (base / Path(value).expanduser()).resolve()


def _marked_values(
    spec: ToolSpec, args: BaseModel
) -> Iterator[tuple[str, LocalPath, Any, bool, BaseModel]]:
    """(field, marker, value, given by the caller, the model holding it) for every marked
    input the tool will get: fields of the models its flat inputs are gathered into (the
    chosen target's only), then its own marked parameters."""
    models = [v for v in spec.call_kwargs(args).values() if isinstance(v, BaseModel)]
    here = runs_here(models)
    for value in models:
        for name, marker in path_fields(type(value)).items():
            if here or not marker.where_job_runs:
                yield name, marker, getattr(value, name), name in value.model_fields_set, value
    own = path_fields(spec.params)
    for name in sorted(spec.fn_params & own.keys()):
        if here or not own[name].where_job_runs:
            yield name, own[name], getattr(args, name), name in args.model_fields_set, args
