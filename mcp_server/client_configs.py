"""Where each MCP client keeps its server list and its skills, and the entry that
starts this server, per scope (from the clients' docs, checked 2026-11):

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
    if client == "claude":
        base = project if scope == "project" else home
        config = project / ".mcp.json" if scope == "project" else home / ".claude.json"
        entry = {"type": "stdio", "command": command, "args": args}
        return ClientTarget(
            client, scope, config, "mcpServers", entry, base / ".claude" / "skills", {}
        )
    config_home = Path(environ.get("XDG_CONFIG_HOME") or home / ".config") / "opencode"
    base = project if scope == "project" else config_home
    skills_dir = (project / ".opencode" if scope == "project" else config_home) / "skills"
    entry = {"type": "local", "command": argv, "enabled": True}
    return ClientTarget(
        client,
        scope,
        base / "opencode.json",
        "mcp",
        entry,
        skills_dir,
        {"$schema": OPENCODE_SCHEMA},
    )
