"""Who may talk to the streamable HTTP server: every request names this server in its
Host header, comes from no web page but the server's own origin, and carries the
server's bearer token, whatever address it binds (loopback is shared by every local
account and reachable from any page a browser shows, through DNS rebinding).

The token comes from a file (`--token-file`, readable by its owner only), else from
FSDP_EKS_MCP_TOKEN, else it is generated at start and shown once on stderr; never from
argv, which every local user can read (`ps`)."""

from __future__ import annotations

import hmac
import os
import re
import secrets
import socket
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOKEN_ENV = "FSDP_EKS_MCP_TOKEN"
# What an HTTP header carries as is (a token outside this would never match), long
# enough that guessing it over a socket is hopeless.
_TOKEN_CHARS = re.compile(r"[\x21-\x7e]{16,4096}")
_MAX_TOKEN_FILE_BYTES = 8192
# Addresses that bind every interface: the server is reached by any of the host's names.
_WILDCARDS = ("0.0.0.0", "::", "")


class TokenRefused(ValueError):
    """The token the server was given cannot be used; the message says what to do."""


def server_token(
    token_file: str | None, environ: Mapping[str, str] = os.environ
) -> tuple[str, bool]:
    """(the token, whether it was generated here): from `token_file`, else the
    environment, else a new random one (the caller shows it once)."""
    if token_file is not None:
        return _checked(_read_token_file(Path(token_file))), False
    if environ.get(TOKEN_ENV):
        return _checked(environ[TOKEN_ENV]), False
    return secrets.token_urlsafe(32), True


def _checked(token: str) -> str:
    token = token.strip()
    if not _TOKEN_CHARS.fullmatch(token):
        raise TokenRefused(
            "the token must be 16 to 4096 printable ASCII characters without spaces (it "
            "travels in a header); e.g. `openssl rand -hex 32`."
        )
    return token


def _read_token_file(path: Path) -> str:
    """The file's text, refused unless it is a regular file only its owner can read or
    write (another account could read the token, or swap it)."""
    try:
        with path.open("rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise TokenRefused(f"--token-file {path} is not a regular file.")
            if info.st_mode & 0o077:
                raise TokenRefused(
                    f"--token-file {path} is readable or writable by other accounts (mode "
                    f"{stat.S_IMODE(info.st_mode):o}): `chmod 600 {path}` first."
                )
            data = handle.read(_MAX_TOKEN_FILE_BYTES + 1)
    except OSError as exc:
        raise TokenRefused(f"cannot read --token-file {path}: {exc.strerror}.") from None
    if len(data) > _MAX_TOKEN_FILE_BYTES:
        raise TokenRefused(f"--token-file {path} is larger than a token.")
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        raise TokenRefused(f"--token-file {path} holds more than ASCII text.") from None


def _authority(name: str, port: int) -> str:
    """How a Host header names `name` at `port` (an IPv6 address in brackets)."""
    shown = f"[{name}]" if ":" in name else name
    return f"{shown}:{port}".lower()


def allowed_hosts(host: str, port: int, extra: Iterable[str] = ()) -> list[str]:
    """The Host header values that name this server: the address it binds, localhost,
    the `extra` names its owner gave (--allow-host); for a wildcard bind, also the
    loopback addresses and this machine's names."""
    names = [host, "localhost", *extra]
    if host in _WILDCARDS:
        names = ["127.0.0.1", "::1", socket.gethostname(), socket.getfqdn(), *names[1:]]
    authorities = [_authority(name, port) for name in names if name not in _WILDCARDS]
    if port == 80:  # a browser leaves the default port out
        authorities += [a.rsplit(":", 1)[0] for a in authorities]
    return list(dict.fromkeys(authorities))


@dataclass(frozen=True)
class Guard:
    """What a request must show: one of `hosts` as its Host, no Origin or one of
    `origins`, and `Authorization: Bearer <token>`."""

    token: str
    hosts: tuple[str, ...]

    @property
    def origins(self) -> tuple[str, ...]:
        """The server's own origins (a page it served, were it to serve one)."""
        return tuple(f"http://{host}" for host in self.hosts)

    def refusal(self, headers: Mapping[bytes, bytes]) -> tuple[int, str] | None:
        """(status, reason) when the request may not reach the server, else None."""
        host = headers.get(b"host", b"").decode("latin-1").lower()
        if host not in self.hosts:
            return 421, "this server does not answer to that Host (--allow-host NAME adds one)"
        origin = headers.get(b"origin")
        if origin is not None and origin.decode("latin-1").lower() not in self.origins:
            return 403, "requests from web pages are refused"
        scheme, _, credentials = headers.get(b"authorization", b"").partition(b" ")
        # compare_digest: how long a wrong token took to reject tells nothing.
        if scheme.lower() != b"bearer" or not hmac.compare_digest(
            credentials.strip(), self.token.encode()
        ):
            return 401, "send 'Authorization: Bearer <token>'"
        return None


class GuardedApp:
    """ASGI middleware: a request the Guard refuses gets its status and one line and
    never reaches the MCP app; the token is never logged or echoed."""

    def __init__(self, app: Any, guard: Guard) -> None:
        self.app = app
        self.guard = guard

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        refused = self.guard.refusal(dict(scope.get("headers") or []))
        if refused is None:
            await self.app(scope, receive, send)
        elif scope["type"] == "http":
            status, reason = refused
            headers = [(b"content-type", b"text/plain")]
            if status == 401:
                headers.append((b"www-authenticate", b"Bearer"))
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": f"{reason}\n".encode()})
        else:  # a websocket: refused before it opens
            await send({"type": "websocket.close", "code": 1008})
