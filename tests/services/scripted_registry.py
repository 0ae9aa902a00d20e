"""A scripted registry on loopback that logs every request's headers: each instance is
one host (127.0.0.1:<its port>), so two instances are two hosts, as a registry and the
blob store (or a hostile second host) it redirects to are.

    with scripted_registry() as a, scripted_registry() as b:
        a.route("/v2/r/manifests/t", 307, headers={"Location": b.url("/v2/r/manifests/t")})
        b.route("/v2/r/manifests/t", 200, body=b"{...}")
        ...
        b.authorizations()   # the Authorization headers b received

A route's body may be bytes, or an iterator of chunks (streamed with no length until
the client hangs up: an endless body). `needs_auth=True` answers 401 with a Basic
challenge to a request without Authorization, as a registry asks for credentials.
"""

from __future__ import annotations

import contextlib
import http.server
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.services._common import serving


@dataclass
class Route:
    status: int
    headers: dict[str, str]
    body: bytes | Iterable[bytes]
    needs_auth: bool


@dataclass
class ScriptedRegistry:
    host: str  # "127.0.0.1:PORT"
    routes: dict[str, Route] = field(default_factory=dict)
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"http://{self.host}{path}"

    def route(
        self,
        path: str,
        status: int = 200,
        *,
        body: bytes | Iterable[bytes] = b"",
        headers: dict[str, str] | None = None,
        needs_auth: bool = False,
    ) -> None:
        self.routes[path] = Route(status, dict(headers or {}), body, needs_auth)

    def authorizations(self) -> list[str]:
        return [value for _, _, headers in self.requests for name, value in headers.items()
                if name.lower() == "authorization"]  # fmt: skip

    def paths(self) -> list[str]:
        return [path for _, path, _ in self.requests]


@contextlib.contextmanager
def scripted_registry() -> Iterator[ScriptedRegistry]:
    registry = ScriptedRegistry(host="")

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # a body without a length ends when the server hangs up

        def _answer(self) -> None:
            path = self.path.split("?", 1)[0]
            registry.requests.append((self.command, self.path, dict(self.headers.items())))
            route = registry.routes.get(path)
            if route is None:
                return self._send(404, {}, b'{"errors": [{"code": "NAME_UNKNOWN"}]}')
            if route.needs_auth and not self.headers.get("Authorization"):
                return self._send(401, {"WWW-Authenticate": 'Basic realm="scripted"'}, b"")
            self._send(route.status, route.headers, route.body)

        def _send(self, status: int, headers: dict[str, str], body: Any) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            if isinstance(body, bytes):
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
                return
            self.end_headers()
            with contextlib.suppress(OSError):  # the client hung up: what an endless body wants
                for chunk in body:
                    self.wfile.write(chunk)

        do_GET = do_HEAD = _answer

        def log_message(self, *args: object) -> None:  # quiet
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    registry.host = f"127.0.0.1:{server.server_address[1]}"
    with serving(server):
        yield registry
