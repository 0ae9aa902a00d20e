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
"enabled": true}` (V1's shape, which V2 still reads)."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

SERVER_NAME = "fsdp-eks"
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


def server_argv(project: Path, scope: Scope = "project") -> list[str]:
    """This interpreter (an absolute path, so the client may start it from any folder)
    running this server. A project's entry names the project as its workspace; a user's
    entry serves whichever project the client opens (its roots, else its folder)."""
    argv = [str(Path(sys.executable).absolute()), "-m", "mcp_server"]
    return argv + ["--workspace", str(project)] if scope == "project" else argv


def client_target(
    client: Client,
    scope: Scope,
    project: Path,
    home: Path | None = None,
    environ: Mapping[str, str] = os.environ,
) -> ClientTarget:
    home = home or Path.home()
    command, *args = argv = server_argv(project, scope)
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
