"""python -m mcp_server install|uninstall --client claude|opencode [--scope project|user]
                                      [--dir PATH] [--dry_run] [--json]

install: adds this server to the client's config (merged: every other server and key
is kept; run twice, the second run changes nothing) and puts the skills in the Claude
skills folder, which opencode reads too (one copy serves both clients). A project's entry
names the project (--dir, default here) as the server's workspace; a user's entry serves
whichever project the client opens. uninstall: removes that entry and, once no client
uses them, those skills, nothing else. --dry_run prints what would change.

Plan, then apply: every file is read and checked first (a config that is not a UTF-8
JSON object, a link, a FIFO or a folder where a file goes refuses the whole run before
anything is written); the writes then go in one pass that is undone if one fails. A
manifest beside the skills (MANIFEST_FILE) records what the installer wrote and its
hash: a skill file it did not write, or one changed since, is never overwritten or
deleted."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mcp_server.client_configs import CLIENTS, SCOPES, SERVER_NAME, ClientTarget, client_target
from mcp_server.config_files import (
    CONFIG_MAX_DEPTH,
    atomic_write_text,
    json_text,
    read_bytes_or_none,
    read_json_object,
    refuse_odd_path,
)
from mcp_server.skill_files import SKILL_FILE, Skill, shipped_skills
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.reading import ReadRefused, parse_json

PROG = "fsdp-eks-mcp"
MANIFEST_FILE = ".fsdp-eks-installed.json"
Action = Literal["create", "update", "remove", "unchanged", "kept"]


@dataclass(frozen=True)
class Change:
    """One file: what happens to it, its new text (None with remove: deleted) and what
    it held before (None: no file), to undo the change if a later one fails."""

    path: Path
    action: Action
    what: str
    text: str | None = None
    before: bytes | None = field(default=None, repr=False)


def _digest(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def _section(target: ClientTarget, data: dict[str, Any]) -> dict[str, Any]:
    section = data.get(target.section, {})
    if not isinstance(section, dict):
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"{target.config}: '{target.section}' is not a JSON object; left as it is.",
            "Fix the file and run the installer again.",
        )
    return section


def _config_change(target: ClientTarget, install: bool) -> Change:
    if target.config.name == "opencode.json":
        jsonc = target.config.with_suffix(".jsonc")
        if not target.config.exists() and (jsonc.exists() or jsonc.is_symlink()):
            raise ToolFailure(  # comments we could not keep: the user adds the entry
                ErrorCode.INVALID_INPUT,
                f"{jsonc} exists; the installer does not rewrite JSONC (its comments).",
                f"Add this under 'mcp' by hand: {json.dumps({SERVER_NAME: target.entry})}",
            )
    refuse_odd_path(target.base, target.config)
    data, before = read_json_object(target.config)
    what = f"{target.section}.{SERVER_NAME}"
    section = _section(target, data or {})
    if install:
        if data is not None and section.get(SERVER_NAME) == target.entry:
            return Change(target.config, "unchanged", what)
        new = {**(target.new_file if data is None else data)}
        new[target.section] = {**section, SERVER_NAME: target.entry}
        action: Action = "create" if data is None else "update"
        return Change(target.config, action, what, json_text(new), before)
    if data is None or SERVER_NAME not in section:
        return Change(target.config, "unchanged", what)
    kept = {name: entry for name, entry in section.items() if name != SERVER_NAME}
    return Change(target.config, "remove", what, json_text({**data, target.section: kept}), before)


# --- the manifest: what the installer wrote ---------------------------------------


def _read_manifest(target: ClientTarget) -> tuple[dict[str, Any], bytes | None]:
    """{"files": {"<skill>/SKILL.md": {"sha256", "clients"}}}; an unreadable manifest
    is refused (what it would have protected stays unknown, so nothing is touched)."""
    path = target.skills_dir / MANIFEST_FILE
    refuse_odd_path(target.base, path)
    data = read_bytes_or_none(path, "installer manifest")
    if data is None:
        return {"files": {}}, None
    try:
        manifest = parse_json(data.decode("utf-8"), what="installer manifest", source=path,
                              max_depth=CONFIG_MAX_DEPTH)  # fmt: skip
    except (UnicodeDecodeError, ReadRefused):
        manifest = None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"{path} is not the installer's manifest; left as it is, and nothing installed.",
            "Move it away: the installer then treats every skill file there as not its own.",
            {"path": str(path)},
        )
    return {"files": files}, data


def _skill_changes(
    target: ClientTarget, skills: list[Skill], install: bool
) -> tuple[list[Change], Change]:
    """The skill files' changes and the manifest's."""
    manifest, manifest_before = _read_manifest(target)
    files: dict[str, dict[str, Any]] = {k: dict(v) for k, v in manifest["files"].items()}
    changes = []
    for skill in skills:
        key = f"{skill.name}/{SKILL_FILE}"
        path = target.skills_dir / key
        refuse_odd_path(target.base, path)
        current = read_bytes_or_none(path, "skill file")
        record = files.get(key)
        ours = (
            record is not None and current is not None and record.get("sha256") == _digest(current)
        )
        clients = set(record.get("clients", [])) if record else set()
        what = f"skill {skill.name}"
        if install:
            if current is not None and not ours:  # the user's, or edited since: theirs
                changes.append(Change(path, "kept", f"{what}: not as the installer wrote it"))
                files.pop(key, None)
                continue
            action: Action = "create" if current is None else "update"
            if current is not None and current == skill.text.encode():
                action = "unchanged"
            changes.append(Change(path, action, what, skill.text, current))
            files[key] = {"sha256": _digest(skill.text),
                          "clients": sorted(clients | {target.client})}  # fmt: skip
            continue
        if record is None or current is None:
            files.pop(key, None)
            continue
        left = clients - {target.client}
        if left and ours:
            files[key] = {**record, "clients": sorted(left)}
            changes.append(Change(path, "kept", f"{what}: still used by {', '.join(sorted(left))}"))
        elif ours:
            changes.append(Change(path, "remove", what, None, current))
            files.pop(key)
        else:
            changes.append(Change(path, "kept", f"{what}: changed since it was installed"))
            files.pop(key)
    path = target.skills_dir / MANIFEST_FILE
    if files == manifest["files"] and (manifest_before is not None or not files):
        return changes, Change(path, "unchanged", "installer manifest")
    if not files:
        return changes, Change(path, "remove", "installer manifest", None, manifest_before)
    text = json_text({"written_by": "fsdp-eks install", "files": files})
    action = "create" if manifest_before is None else "update"
    return changes, Change(path, action, "installer manifest", text, manifest_before)


def plan(target: ClientTarget, install: bool, skills: list[Skill] | None = None) -> list[Change]:
    """Every file install (or uninstall) would touch, all read and checked; nothing
    written. The config comes last: it is written once everything else was."""
    skills = shipped_skills() if skills is None else skills
    config = _config_change(target, install)
    skill_changes, manifest = _skill_changes(target, skills, install)
    return [*skill_changes, manifest, config]


def apply(changes: list[Change]) -> None:
    """Every change, or none: a write that fails undoes the ones before it."""
    done: list[Change] = []
    for change in changes:
        if change.action in ("unchanged", "kept"):
            continue
        try:
            _write(change)
        except OSError as exc:
            for written in reversed(done):
                _undo(written)
            raise ToolFailure(
                ErrorCode.INTERNAL_ERROR,
                f"Writing {change.path} failed ({exc.strerror or type(exc).__name__}); "
                "every file written before it was restored.",
                "Fix what stopped the write (permissions, disk space) and run it again.",
                {"path": str(change.path)},
            ) from None
        done.append(change)


def _write(change: Change) -> None:
    if change.text is not None:
        change.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(change.path, change.text)
        return
    change.path.unlink(missing_ok=True)
    if change.path.name != SKILL_FILE:
        return
    try:  # the skill's folder goes only when nothing of anyone else's is left in it
        change.path.parent.rmdir()
    except OSError:
        pass


def _undo(change: Change) -> None:
    try:
        if change.before is None:
            change.path.unlink(missing_ok=True)
        else:
            change.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(change.path, change.before.decode("utf-8", "surrogateescape"))
    except OSError:  # what could not be restored is named in the server's log
        print(f"{PROG}: could not restore {change.path}", file=sys.stderr)


def _project(path: str | None) -> Path:
    project = Path(path or ".").expanduser().resolve()
    if not project.is_dir():
        raise ToolFailure(ErrorCode.NOT_A_DIRECTORY, f"--dir {project} is not a directory.")
    return project


def run(args: argparse.Namespace) -> dict[str, Any]:
    install = args.command == "install"
    target = client_target(args.client, args.scope, _project(args.dir))
    changes = plan(target, install)
    if not args.dry_run:
        apply(changes)
    return {
        "command": args.command,
        "client": target.client,
        "scope": target.scope,
        "dry_run": args.dry_run,
        "config": str(target.config),
        "skills_dir": str(target.skills_dir),
        "entry": {SERVER_NAME: target.entry},
        "changes": [{"path": str(c.path), "action": c.action, "what": c.what} for c in changes],
    }


def summary(report: dict[str, Any]) -> str:
    verb = "would " if report["dry_run"] else ""
    lines = [
        f"{verb}{c['action']}: {c['path']} ({c['what']})"
        for c in report["changes"]
        if c["action"] != "unchanged"
    ]
    unchanged = sum(c["action"] == "unchanged" for c in report["changes"])
    lines.append(f"{unchanged} file(s) already up to date.")
    if report["command"] == "install":
        lines.append(f"server entry: {json.dumps(report['entry'])}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{PROG} install",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=("install", "uninstall"))
    parser.add_argument("--client", required=True, choices=CLIENTS)
    parser.add_argument(
        "--scope",
        default="project",
        choices=SCOPES,
        help="project: files in --dir; user: in your home (default project).",
    )
    parser.add_argument(
        "--dir",
        metavar="PATH",
        help="The project folder, also the server's workspace (default: here).",
    )
    parser.add_argument(
        "--dry_run",
        "--dry-run",
        action="store_true",
        help="Print what would change; write nothing.",
    )
    parser.add_argument("--json", action="store_true", help="Print the report as JSON.")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        report = run(args)
    except ToolFailure as failure:
        if args.json:
            print(json.dumps(failure.to_dict()))
        else:
            hint = f" ({failure.hint})" if failure.hint else ""
            print(f"{PROG}: {failure.code}: {failure.message}{hint}", file=sys.stderr)
        return failure.exit_status
    print(json.dumps(report, indent=2) if args.json else summary(report))
    return 0
