"""python -m mcp_server install|uninstall --client claude|opencode [--scope project|user]
                                      [--dir PATH] [--dry_run] [--json]

install: adds this server to the client's config (merged: every other server and key
is kept; run twice, the second run changes nothing), with the project folder (--dir,
default here) as its workspace, and copies the skills into the client's skills folder.
uninstall: removes that entry and those skills, nothing else. --dry_run prints what
would change and writes nothing."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from mcp_server.client_configs import CLIENTS, SCOPES, SERVER_NAME, ClientTarget, client_target
from mcp_server.config_files import (
    atomic_write_text,
    json_text,
    read_json_object,
    refuse_symlink,
)
from mcp_server.skill_files import SKILL_FILE, Skill, shipped_skills
from skills.shared.errors import ErrorCode, ToolFailure

PROG = "fsdp-eks-mcp"
Action = Literal["create", "update", "remove", "unchanged"]


@dataclass(frozen=True)
class Change:
    """One file: what happens to it, and its new text (None: the file is deleted)."""

    path: Path
    action: Action
    what: str
    text: str | None = None


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
    if target.config.name == "opencode.json" and not target.config.exists():
        jsonc = target.config.with_suffix(".jsonc")
        if jsonc.exists():  # comments we could not keep: the user adds the entry
            raise ToolFailure(
                ErrorCode.INVALID_INPUT,
                f"{jsonc} exists; the installer does not rewrite JSONC (its comments).",
                f"Add this under 'mcp' by hand: {json.dumps({SERVER_NAME: target.entry})}",
            )
    data = read_json_object(target.config)
    what = f"{target.section}.{SERVER_NAME}"
    section = _section(target, data or {})
    if install:
        if data is not None and section.get(SERVER_NAME) == target.entry:
            return Change(target.config, "unchanged", what)
        new = {**(target.new_file if data is None else data)}
        new[target.section] = {**section, SERVER_NAME: target.entry}
        return Change(target.config, "create" if data is None else "update", what, json_text(new))
    if data is None or SERVER_NAME not in section:
        return Change(target.config, "unchanged", what)
    kept = {name: entry for name, entry in section.items() if name != SERVER_NAME}
    return Change(target.config, "remove", what, json_text({**data, target.section: kept}))


def _skill_change(target: ClientTarget, skill: Skill, install: bool) -> Change:
    folder = target.skills_dir / skill.name
    path = folder / SKILL_FILE
    refuse_symlink(folder)
    refuse_symlink(path)
    what = f"skill {skill.name}"
    current = path.read_text(encoding="utf-8") if path.is_file() else None
    if not install:
        return Change(path, "unchanged" if current is None else "remove", what)
    if current == skill.text:
        return Change(path, "unchanged", what)
    return Change(path, "create" if current is None else "update", what, skill.text)


def plan(target: ClientTarget, install: bool, skills: list[Skill] | None = None) -> list[Change]:
    """Every file install (or uninstall) would touch, nothing written."""
    skills = shipped_skills() if skills is None else skills
    return [_config_change(target, install)] + [_skill_change(target, s, install) for s in skills]


def apply(changes: list[Change]) -> None:
    for change in changes:
        if change.action == "unchanged":
            continue
        if change.text is not None:
            atomic_write_text(change.path, change.text)
            continue
        change.path.unlink(missing_ok=True)
        try:  # the skill's folder goes only when nothing of anyone else's is left in it
            change.path.parent.rmdir()
        except OSError:
            pass


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
        "changes": [{k: str(v) for k, v in asdict(c).items() if k != "text"} for c in changes],
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
