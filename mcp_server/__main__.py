"""fsdp-eks-mcp [--workspace DIR] [--allow-path DIR ...] [--read-only]
             [--http [--host H] [--port P] [--token T]]
fsdp-eks-mcp install|uninstall --client claude|opencode ...  (mcp_server/install.py)

The workspace is the user's project: --workspace DIR, else the client's first root
(roots/list), else the directory the server starts in. Relative paths and the tools'
default places (runs/) resolve there, and tool calls may name local paths only under it
or, for inputs the tools only read, under an --allow-path root. Streamable HTTP on an address
other than loopback needs a bearer token; with a token, every request must carry it."""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import os
import re
import sys
import threading
from typing import Any

from mcp_server.server import build_server
from mcp_server.workspace import ALLOW_PATHS_ENV, DEFAULT_WORKSPACE, WORKSPACE_ENV, Workspace
from skills.shared.distribution import collision_warning

TOKEN_ENV = "FSDP_EKS_MCP_TOKEN"
MCP_PATH = "/mcp"
PROG = "fsdp-eks-mcp"
# What an HTTP header can carry as is: a token outside this would never match.
_TOKEN_CHARS = re.compile(r"[\x21-\x7e]+")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--http", action="store_true", help="Serve streamable HTTP, not stdio.")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address.")
    parser.add_argument("--port", type=int, default=8000, help="HTTP port.")
    parser.add_argument(
        "--token",
        help=f"Bearer token every HTTP request must carry; required off loopback. {TOKEN_ENV} "
        "is the same and keeps it out of the process list.",
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


def _refuse(message: str) -> None:
    """One line on stderr and exit status 2: the caller fixes the command line."""
    print(f"{PROG}: {message}", file=sys.stderr)
    sys.exit(2)


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


class BearerAuth:
    """ASGI middleware: an HTTP request without `Authorization: Bearer <token>` gets 401
    and never reaches the MCP app. The token is compared in constant time and never
    logged or echoed."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan" or self._authorized(scope):
            await self.app(scope, receive, send)
        elif scope["type"] == "http":
            headers = [(b"www-authenticate", b"Bearer"), (b"content-type", b"text/plain")]
            await send({"type": "http.response.start", "status": 401, "headers": headers})
            await send({"type": "http.response.body", "body": b"unauthorized\n"})
        else:  # a websocket: refused before it opens
            await send({"type": "websocket.close", "code": 1008})

    def _authorized(self, scope: dict[str, Any]) -> bool:
        value = dict(scope.get("headers") or []).get(b"authorization", b"")
        scheme, _, credentials = value.partition(b" ")
        # compare_digest: how long a wrong token took to reject tells nothing.
        return scheme.lower() == b"bearer" and hmac.compare_digest(credentials, self._token)


def _token(args: argparse.Namespace) -> str | None:
    token = args.token or os.environ.get(TOKEN_ENV) or None
    if token is not None and not _TOKEN_CHARS.fullmatch(token):
        _refuse("the token must be printable ASCII without spaces (it travels in a header).")
    if token is None and not is_loopback(args.host):
        _refuse(
            f"--http on {args.host} (not a loopback address) needs a bearer token: set "
            f"{TOKEN_ENV}=<secret> (or pass --token <secret>); clients then send "
            "'Authorization: Bearer <secret>'."
        )
    return token


def http_url(host: str, port: int) -> str:
    """The endpoint a client connects to (an IPv6 address in brackets)."""
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{MCP_PATH}"


def _serve_http(server: Any, host: str, port: int, token: str | None) -> None:
    import uvicorn

    app = server.streamable_http_app(host=host, streamable_http_path=MCP_PATH)
    if token is not None:
        app = BearerAuth(app, token)
    auth = " (send 'Authorization: Bearer <token>')" if token is not None else ""
    print(f"{PROG}: serving MCP on {http_url(host, port)}{auth}", file=sys.stderr, flush=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")


def _warn_of_collisions() -> None:
    """One line on stderr (the client's server log) when another distribution in this
    environment ships one of the suite's top-level packages."""
    warning = collision_warning()
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["install"], ["uninstall"]):
        from mcp_server.install import main as install_main

        sys.exit(install_main(argv))
    args = _parser().parse_args(argv)
    # Off the start's path: reading every installed distribution takes a while.
    threading.Thread(target=_warn_of_collisions, daemon=True).start()
    token = _token(args) if args.http else None
    workspace = Workspace.create(args.workspace, args.allow_path)
    if workspace.root.exists() and not workspace.root.is_dir():
        _refuse(f"the workspace {workspace.root} exists and is not a directory.")
    try:  # the tools' relative defaults (a Dockerfile, runs/) are the project's
        workspace.root.mkdir(parents=True, exist_ok=True)
        os.chdir(workspace.root)
    except OSError as exc:
        _refuse(f"cannot work in the workspace {workspace.root}: {exc.strerror}.")
    server = build_server(read_only=args.read_only, workspace=workspace)
    server.follow_workspace = True
    if args.http:
        _serve_http(server, args.host, args.port, token)
    else:
        import anyio

        from mcp_server.stdio import serve_stdio

        anyio.run(serve_stdio, server)


if __name__ == "__main__":
    main()
