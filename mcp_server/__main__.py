"""fsdp-eks-mcp [--workspace DIR] [--allow-path DIR ...] [--read-only]
             [--http [--host H] [--port P] [--token-file F] [--allow-host N ...]]
fsdp-eks-mcp install|uninstall --client claude|opencode ...  (mcp_server/install.py)

The workspace is the user's project: --workspace DIR, else the client's first root
(roots/list), else the git root above the directory it starts in, else that directory.
Relative paths and the tools' default places (runs/) resolve there, and tool calls may
name local paths only under it or, for inputs the tools only read, under an --allow-path
root; each client session has its own (its roots are never another's). Streamable HTTP,
on any address, answers only requests that carry its bearer token (--token-file, else
FSDP_EKS_MCP_TOKEN, else one made at start and printed once) and name it in Host, from
no web page but its own origin."""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
from typing import Any, NoReturn

import anyio

from mcp_server.http_guard import (
    TOKEN_ENV,
    Guard,
    GuardedApp,
    TokenRefused,
    allowed_hosts,
    server_token,
)
from mcp_server.server import build_server
from mcp_server.stdio import serve_stdio
from mcp_server.workspace import ALLOW_PATHS_ENV, DEFAULT_WORKSPACE, WORKSPACE_ENV, Workspace
from skills.shared.distribution import collision_warning

MCP_PATH = "/mcp"
PROG = "fsdp-eks-mcp"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--http", action="store_true", help="Serve streamable HTTP, not stdio.")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address.")
    parser.add_argument("--port", type=int, default=8000, help="HTTP port.")
    parser.add_argument(
        "--token", metavar="T", help="Refused (ps shows a command line): see --token-file."
    )
    parser.add_argument(
        "--token-file",
        metavar="FILE",
        help=f"Read the bearer token every HTTP request must carry from FILE (mode 600); "
        f"else {TOKEN_ENV}; else one is made at start and printed once.",
    )
    parser.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="Also answer HTTP requests whose Host is NAME (a proxy's name); repeatable.",
    )
    parser.add_argument(
        "--workspace",
        metavar="DIR",
        help=f"The project: relative paths resolve here, callers' local paths must lie "
        f"under it, jobs are written here (env {WORKSPACE_ENV}; default: the client's "
        f"first root, else {DEFAULT_WORKSPACE}).",
    )
    parser.add_argument(
        "--allow-path",
        action="append",
        default=[],
        metavar="DIR",
        help=f"Also let callers read under DIR (datasets, models); repeatable (env "
        f"{ALLOW_PATHS_ENV}, '{os.pathsep}'-separated).",
    )
    parser.add_argument(
        "--read-only", action="store_true", help="Serve only the tools that change nothing."
    )
    return parser


def _refuse(message: str) -> NoReturn:
    """One line on stderr and exit status 2: the caller fixes the command line."""
    print(f"{PROG}: {message}", file=sys.stderr)
    sys.exit(2)


def _token(args: argparse.Namespace) -> tuple[str, bool]:
    """(the HTTP server's token, whether it was made here), or exit 2 saying why not."""
    if args.token is not None:
        _refuse(
            f"--token is refused: every local user can read a command line (ps). Set "
            f"{TOKEN_ENV}=<secret>, or --token-file FILE (mode 600), or give neither and "
            "the server makes a token and prints it once."
        )
    try:
        return server_token(args.token_file)
    except TokenRefused as refused:
        _refuse(str(refused))


def http_url(host: str, port: int) -> str:
    """The endpoint a client connects to (an IPv6 address in brackets)."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{MCP_PATH}"


def _serve_http(server: Any, args: argparse.Namespace, token: str, made: bool) -> None:
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    try:  # bound here, so the port (0: any free one) is known before the Host check
        family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
        sock = socket.create_server((args.host, args.port), family=family)
    except OSError as exc:
        _refuse(f"cannot listen on {http_url(args.host, args.port)}: {exc.strerror}.")
    bound, port = sock.getsockname()[:2]  # `localhost` binds 127.0.0.1: both name it
    guard = Guard(token, tuple(allowed_hosts(args.host, port, [bound, *args.allow_host])))
    security = TransportSecuritySettings(  # the SDK's own check, the same names
        allowed_hosts=list(guard.hosts), allowed_origins=list(guard.origins)
    )
    app = server.streamable_http_app(
        host=args.host, streamable_http_path=MCP_PATH, transport_security=security
    )
    print(
        f"{PROG}: serving MCP on {http_url(args.host, port)}; clients send "
        "'Authorization: Bearer <token>'",
        file=sys.stderr,
    )
    if made:  # shown once, here only: the owner passes it to the clients
        print(f"{PROG}: token (shown once): {token}", file=sys.stderr)
    sys.stderr.flush()
    config = uvicorn.Config(GuardedApp(app, guard), log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])


def _warn_of_collisions() -> None:
    """One line on stderr (the client's server log) when another distribution in this
    environment ships one of the suite's top-level packages."""
    warning = collision_warning()
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["install"], ["uninstall"]):
        from mcp_server.install import main as install_main  # YAML, client configs: off the start

        sys.exit(install_main(argv))
    args = _parser().parse_args(argv)
    # Off the start's path: reading every installed distribution takes a while.
    threading.Thread(target=_warn_of_collisions, daemon=True).start()
    token, made = _token(args) if args.http or args.token is not None else ("", False)
    workspace = Workspace.create(args.workspace, args.allow_path)
    if workspace.root.exists() and not workspace.root.is_dir():
        _refuse(f"the workspace {workspace.root} exists and is not a directory.")
    try:  # the tools' relative defaults (a Dockerfile, runs/) resolve there, per session
        workspace.root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _refuse(f"cannot work in the workspace {workspace.root}: {exc.strerror}.")
    server = build_server(read_only=args.read_only, workspace=workspace)
    if args.http:
        _serve_http(server, args, token, made)
    else:
        anyio.run(serve_stdio, server)


if __name__ == "__main__":
    main()
