"""Where each MCP client keeps its server list and its skills, and the entry that
starts this server, per scope (from the clients' docs, checked 2026-11):

Skills go in the Claude folders for both clients: opencode also reads
`.claude/skills/` and `~/.claude/skills/`, so one copy serves both (two copies made it
warn "duplicate skill name").

Claude Code (code.claude.com/docs/en/mcp, /en/skills): project scope `.mcp.json`
`mcpServers` and `.claude/skills/<name>/SKILL.md`; user scope `~/.claude.json`
`mcpServers` (top level) and `~/.claude/skills/<name>/SKILL.md`. A stdio entry is
`{"type": "stdio", "command": ..., "args": [...]}`.

opencode (opencode.ai/docs/mcp-servers, /docs/skills, /docs/config): project scope
`opencode.json` `mcp` and `.opencode/skills/<name>/SKILL.md`; user scope
`~/.config/opencode/opencode.json` (XDG_CONFIG_HOME honoured) and
`~/.config/opencode/skills/`. A local entry is `{"type": "local", "command": [argv],
"enabled": true}` (V1's shape, which V2 still reads).

A project's entry is committed and shared, so it names no path of this machine: the
console script `fsdp-eks-mcp`, found on PATH when the client starts it (`uv tool install`
puts it there), with the project found at start (the client's roots, else the git
root, else the folder it starts in). A user's entry is this machine's own: the absolute
launcher of this installation."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from skills.operations.processes import SAFE_PATH_FLAGS

SERVER_NAME = "fsdp-eks"
# The console script (pyproject [project.scripts]): it imports only the installed suite,
# never a package in the folder the client starts it in.
LAUNCHER = "fsdp-eks-mcp"
OPENCODE_SCHEMA = "https://opencode.ai/config.json"
Client = Literal["claude", "opencode"]
Scope = Literal["project", "user"]
CLIENTS: tuple[Client, ...] = ("claude", "opencode")
SCOPES: tuple[Scope, ...] = ("project", "user")


@dataclass(frozen=True)
class ClientTarget:
    """One client at one scope: the config file, the object in it that maps server
    names to entries, our entry, and the folder skills go in."""

    client: Client
    scope: Scope
    config: Path
    section: str
    entry: dict[str, Any]
    skills_dir: Path
    # What a config file this installer creates starts with (opencode's schema link).
    new_file: dict[str, Any]
    # The folder the installer works below (the project): no link between it and a file
    # it writes is followed. None (a user's home): folders may be links, files not.
    base: Path | None


def own_launcher() -> Path | None:
    """This installation's console script (beside its interpreter), if it has one."""
    script = Path(sys.executable).absolute().parent / LAUNCHER
    return script if script.is_file() else None


def server_argv(scope: Scope = "project") -> list[str]:
    """How the client starts this server. A project's: the launcher by name (no path of
    this machine in a file the team commits). A user's: this installation's launcher by
    its absolute path, else this interpreter in safe-path mode (the folder the client
    starts it in is never on its import path)."""
    if scope == "project":
        return [LAUNCHER]
    script = own_launcher()
    if script is not None:
        return [str(script)]
    return [str(Path(sys.executable).absolute()), *SAFE_PATH_FLAGS, "-m", "mcp_server"]


def launcher_warning(scope: Scope, path: str | None = None) -> str | None:
    """Why a project's entry would not start here (its launcher is not on PATH), or None."""
    if scope != "project" or shutil.which(LAUNCHER, path=path) is not None:
        return None
    where = own_launcher()
    fix = f"add {where.parent} to PATH" if where else "install the suite as a tool"
    return (
        f"{LAUNCHER} is not on PATH, so the client cannot start the server: {fix} "
        "(uv tool install puts it on PATH; README: Install)."
    )


def client_target(
    client: Client,
    scope: Scope,
    project: Path,
    home: Path | None = None,
    environ: Mapping[str, str] = os.environ,
) -> ClientTarget:
    home = home or Path.home()
    command, *args = argv = server_argv(scope)
    base = project if scope == "project" else home
    skills_dir = base / ".claude" / "skills"
    strict = project if scope == "project" else None
    if client == "claude":
        config = project / ".mcp.json" if scope == "project" else home / ".claude.json"
        entry = {"type": "stdio", "command": command, "args": args}
        return ClientTarget(client, scope, config, "mcpServers", entry, skills_dir, {}, strict)
    config_home = Path(environ.get("XDG_CONFIG_HOME") or home / ".config") / "opencode"
    config = (project if scope == "project" else config_home) / "opencode.json"
    entry = {"type": "local", "command": argv, "enabled": True}
    return ClientTarget(
        client, scope, config, "mcp", entry, skills_dir, {"$schema": OPENCODE_SCHEMA}, strict
    )
