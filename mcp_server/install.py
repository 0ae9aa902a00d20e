"""fsdp-eks-mcp install|uninstall --client claude|opencode [--scope project|user]
                              [--dir PATH] [--dry_run] [--json]

install: adds this server to the client's config (merged: every other server and key
is kept; run twice, the second run changes nothing) and puts the skills in the Claude
skills folder, which opencode reads too (one copy serves both clients), and, in a
project, `runs/` in its .gitignore. Both entries start the console script `fsdp-eks-mcp`
(a project's by name, found on PATH: no path of this machine in a file the team commits),
which serves the project the client opens (its roots, else the git root). One scope per
client: a second is refused. uninstall: removes that entry and, once no client uses
them, those skills and the files and folders the installer made, nothing else.
--dry_run prints what would change.

Plan, then apply: every file is read and checked first (a config that is not a UTF-8
JSON object, a link, a FIFO or a folder where a file goes refuses the whole run before
anything is written); the writes then go in one pass that is undone if one fails. A
manifest beside the skills (MANIFEST_FILE) records what the installer wrote and its
hash: a skill file it did not write, or one changed since, is never overwritten or
deleted."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from mcp_server.client_configs import (
    CLIENTS,
    SCOPES,
    SERVER_NAME,
    ClientTarget,
    client_target,
    launcher_warning,
)
from mcp_server.config_files import (
    CONFIG_MAX_DEPTH,
    atomic_write_text,
    json_text,
    read_bytes_or_none,
    read_json_object,
    refuse_odd_path,
)
from mcp_server.skill_files import SKILL_FILE, Skill, shipped_skills
from skills.shared.distribution import collision_warning
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.paths import project_root
from skills.shared.reading import ReadRefused, parse_json

PROG = "fsdp-eks-mcp"
MANIFEST_FILE = ".fsdp-eks-installed.json"
Action = Literal["create", "update", "remove", "unchanged", "kept", "rmdir"]


@dataclass(frozen=True)
class Change:
    """One file (or, with rmdir, a folder the installer made): what happens to it, its
    new text (None with remove: deleted) and what it held before (None: no file), to
    undo the change if a later one fails."""

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


def _config_change(target: ClientTarget, install: bool, made_it: bool) -> Change:
    """The client's config: our entry merged in, or taken out (the whole file, when the
    installer made it (`made_it`) and nothing but its empty skeleton is left)."""
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
    left = {**data, target.section: kept}
    if made_it and left == {**target.new_file, target.section: {}}:
        return Change(target.config, "remove", f"{what} (the file it made)", None, before)
    return Change(target.config, "remove", what, json_text(left), before)


def _refuse_second_scope(target: ClientTarget, project: Path) -> None:
    """One install per client: the other scope's entry too would start two servers and
    load two copies of every skill (the clients warn of both)."""
    other = client_target(
        target.client, "user" if target.scope == "project" else "project", project
    )
    try:
        data, _ = read_json_object(other.config)
        section = _section(other, data or {})
    except ToolFailure:  # not ours to judge here; that scope's own install reports it
        return
    if SERVER_NAME in section:
        where = f" --dir {project}" if other.scope == "project" else ""
        undo = f"{PROG} uninstall --client {target.client} --scope {other.scope}{where}"
        raise ToolFailure(
            ErrorCode.CONFLICT,
            f"{SERVER_NAME} is already installed for {target.client} at {other.scope} scope "
            f"({other.config}); one scope per client (two start two servers and load every "
            "skill twice).",
            f"Keep that one, or run `{undo}` first, then install at {target.scope} scope.",
            {"installed": str(other.config)},
        )


# --- the manifest: what the installer wrote ---------------------------------------


def _read_manifest(target: ClientTarget) -> tuple[dict[str, Any], bytes | None]:
    """{"files": {"<skill>/SKILL.md": {"sha256", "clients", "was"?}}, "created":
    {"<path>": {"kind", "clients", ...}}}; an unreadable manifest is refused (what it
    would have protected stays unknown, so nothing is touched)."""
    path = target.skills_dir / MANIFEST_FILE
    refuse_odd_path(target.base, path)
    data = read_bytes_or_none(path, "installer manifest")
    if data is None:
        return {"files": {}, "created": {}}, None
    try:
        manifest = parse_json(
            data.decode("utf-8"), what="installer manifest", source=path, max_depth=CONFIG_MAX_DEPTH
        )
    except (UnicodeDecodeError, ReadRefused):
        manifest = None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    created = manifest.get("created", {}) if isinstance(manifest, dict) else None
    records = [*(files or {}).values(), *(created or {}).values()]
    if (
        not isinstance(files, dict)
        or not isinstance(created, dict)
        or not all(isinstance(v, dict) for v in records)
    ):
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"{path} is not the installer's manifest; left as it is, and nothing installed.",
            "Move it away: the installer then treats every skill file there as not its own.",
            {"path": str(path)},
        )
    return {"files": files, "created": created}, data


def _skill_changes(
    target: ClientTarget, skills: list[Skill], install: bool, recorded: dict[str, Any]
) -> tuple[list[Change], dict[str, dict[str, Any]]]:
    """The skill files' changes and the manifest's new "files". A record's "was" is the
    digest a file had before an install that was about to rewrite it: a run stopped
    between the manifest and that file (the manifest is written first) still knows the
    file as its own."""
    files: dict[str, dict[str, Any]] = {k: dict(v) for k, v in recorded.items()}
    changes = []
    for skill in skills:
        key = f"{skill.name}/{SKILL_FILE}"
        path = target.skills_dir / key
        refuse_odd_path(target.base, path)
        current = read_bytes_or_none(path, "skill file")
        record = files.get(key)
        ours = (
            record is not None
            and current is not None
            and _digest(current) in (record.get("sha256"), record.get("was"))
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
            files[key] = {
                "sha256": _digest(skill.text),
                "clients": sorted(clients | {target.client}),
            }
            if action == "update" and current is not None:
                files[key]["was"] = _digest(current)
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
    return changes, files


# --- what the installer made besides the skills: its config file, the .gitignore line,
# the folders on the way; each recorded with the clients that still need it ------------

IGNORED_LINE = "runs/"  # the jobs' run folders (logs, checkpoints): never committed
_IGNORED_ALREADY = frozenset({"runs", "runs/", "/runs", "/runs/"})


def _home_of(target: ClientTarget) -> Path:
    """The folder the manifest's paths are relative to: the project, or the home."""
    return target.skills_dir.parent.parent


def _key(target: ClientTarget, path: Path) -> str:
    home = _home_of(target)
    return str(path.relative_to(home)) if path.is_relative_to(home) else str(path)


def _missing_folders(target: ClientTarget, path: Path) -> list[Path]:
    """The folders above `path` (up to the project or home) that do not exist yet."""
    home = _home_of(target)
    stop = home if path.is_relative_to(home) else Path(path.anchor)
    return [p for p in path.parents if p.is_relative_to(stop) and p != stop and not p.exists()]


def _gitignore_change(
    target: ClientTarget, install: bool, record: dict[str, Any] | None, drop: bool
) -> tuple[Change | None, dict[str, Any] | None]:
    """The project's .gitignore gets IGNORED_LINE (merged: a file that ignores runs/
    already is left alone); the line goes again, and the file if the installer made it
    and nothing else is in it, when no client uses the install any more (`drop`)."""
    path = _home_of(target) / ".gitignore"
    refuse_odd_path(target.base, path)
    current = read_bytes_or_none(path, ".gitignore")
    try:
        text = (current or b"").decode("utf-8")
    except UnicodeDecodeError:  # not text we could write back as it was: left alone
        return None, record
    lines = text.splitlines()
    if install:
        if any(line.strip() in _IGNORED_ALREADY for line in lines):
            return None, record
        new = text + ("" if not text or text.endswith("\n") else "\n") + IGNORED_LINE + "\n"
        action: Action = "create" if current is None else "update"
        made = {"kind": "line", "line": IGNORED_LINE, "file": current is None}
        return Change(path, action, f"{IGNORED_LINE} ignored", new, current), record or made
    if record is None or not drop:
        return None, record
    if current is None or IGNORED_LINE not in lines:
        return None, None
    lines.remove(IGNORED_LINE)
    left = "".join(f"{line}\n" for line in lines)
    if record.get("file") and not left.strip():
        return Change(
            path, "remove", f"{IGNORED_LINE} ignored (the file it made)", None, current
        ), None
    return Change(path, "remove", f"{IGNORED_LINE} ignored", left, current), None


def _manifest_text(files: dict[str, Any], created: dict[str, Any], intent: bool) -> str:
    """The manifest; without `intent`, no "was" (every write it announced is done)."""
    if not intent:
        files = {k: {n: v for n, v in r.items() if n != "was"} for k, r in files.items()}
    return json_text({"written_by": "fsdp-eks install", "files": files, "created": created})


def plan(
    target: ClientTarget,
    install: bool,
    skills: list[Skill] | None = None,
    project: Path | None = None,
) -> list[Change]:
    """Every file install (or uninstall) would touch, all read and checked; nothing
    written. Install writes the manifest first (what it is about to write), so a run
    stopped at any point leaves files the next run knows as its own; the config comes
    last, once everything else was written. Uninstall removes, then records."""
    skills = shipped_skills() if skills is None else skills
    if install and project is not None:
        _refuse_second_scope(target, project)
    manifest, manifest_before = _read_manifest(target)
    created: dict[str, dict[str, Any]] = {k: dict(v) for k, v in manifest["created"].items()}
    config_key = _key(target, target.config)
    config = _config_change(target, install, made_it=config_key in created)
    skill_changes, files = _skill_changes(target, skills, install, manifest["files"])
    manifest_path = target.skills_dir / MANIFEST_FILE
    made: dict[str, dict[str, Any]] = {}
    if install:  # what this install makes, and what it made before and still needs
        if config.action == "create" or config_key in created:
            made[config_key] = created.get(config_key, {"kind": "file"})
        for path in (target.config, manifest_path):
            for folder in path.parents:
                key = _key(target, folder)
                if key in created or folder in _missing_folders(target, path):
                    made[key] = created.get(key, {"kind": "dir"})
    ignore_key = ".gitignore"
    ignore: Change | None = None
    if target.scope == "project":
        drop = not install and set(created.get(ignore_key, {}).get("clients", [])) <= {
            target.client
        }
        ignore, record = _gitignore_change(target, install, created.get(ignore_key), drop)
        if install and record is not None:
            made[ignore_key] = record
        elif record is None:
            created.pop(ignore_key, None)
    gone: list[Change] = []
    for key, record in made.items() if install else list(created.items()):
        clients = set(record.get("clients", []))
        if install:
            kept = created.get(key, record)
            created[key] = {
                **kept,
                "clients": sorted(set(kept.get("clients", [])) | {target.client}),
            }
            continue
        if key == config_key and record.get("kind") == "file":
            clients = set()  # a config file serves one client: this one
        left = clients - {target.client}
        if left:
            created[key] = {**record, "clients": sorted(left)}
            continue
        created.pop(key)
        if record.get("kind") == "dir":
            folder = Path(key) if Path(key).is_absolute() else _home_of(target) / key
            gone.append(Change(folder, "rmdir", f"folder {key} (if empty)"))
    gone.sort(key=lambda c: len(c.path.parts), reverse=True)  # the deepest first
    extra = [ignore] if ignore is not None else []
    final = _manifest_text(files, created, intent=False)
    if not files and not created:
        action: Action = "remove" if manifest_before is not None else "unchanged"
        manifest_change = Change(manifest_path, action, "installer manifest", None, manifest_before)
    elif manifest_before == final.encode():
        manifest_change = Change(manifest_path, "unchanged", "installer manifest")
    else:
        action = "create" if manifest_before is None else "update"
        manifest_change = Change(
            manifest_path, action, "installer manifest", final, manifest_before
        )
    if not install:
        return [*skill_changes, config, *extra, manifest_change, *gone]
    intent_text = _manifest_text(files, created, intent=True)
    if manifest_change.action == "unchanged" or intent_text == manifest_change.text:
        return [manifest_change, *skill_changes, *extra, config]
    intent = Change(
        manifest_path,
        manifest_change.action,
        "installer manifest (intent)",
        intent_text,
        manifest_before,
    )
    return [intent, *skill_changes, *extra, manifest_change, config]


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
    if change.action == "rmdir":
        with contextlib.suppress(OSError):  # a folder something else is in now stays
            change.path.rmdir()
        return
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
        if change.action == "rmdir":
            change.path.mkdir(parents=True, exist_ok=True)
        elif change.before is None:
            change.path.unlink(missing_ok=True)
        else:
            change.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(change.path, change.before.decode("utf-8", "surrogateescape"))
    except OSError:  # what could not be restored is named in the server's log
        print(f"{PROG}: could not restore {change.path}", file=sys.stderr)


def _project(path: str | None) -> Path:
    """--dir, else the project this folder is in (project_root: the git root), as the
    server and the CLI find it."""
    project = Path(path).expanduser().resolve() if path else project_root(Path.cwd())
    if not project.is_dir():
        raise ToolFailure(ErrorCode.NOT_A_DIRECTORY, f"--dir {project} is not a directory.")
    return project


def run(args: argparse.Namespace) -> dict[str, Any]:
    install = args.command == "install"
    project = _project(args.dir)
    target = client_target(args.client, args.scope, project)
    changes = plan(target, install, project=project)
    if not args.dry_run:
        apply(changes)
    warnings = [launcher_warning(target.scope), collision_warning()] if install else []
    return {
        "command": args.command,
        "client": target.client,
        "scope": target.scope,
        "dry_run": args.dry_run,
        "config": str(target.config),
        "skills_dir": str(target.skills_dir),
        "entry": {SERVER_NAME: target.entry},
        "changes": [{"path": str(c.path), "action": c.action, "what": c.what} for c in changes],
        "warnings": [warning for warning in warnings if warning],
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
    lines += [f"warning: {warning}" for warning in report["warnings"]]
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
        help="The project folder (default: the git root above here, else here).",
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
