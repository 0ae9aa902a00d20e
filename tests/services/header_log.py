"""A fake registry on loopback that logs every request's headers: where credentials
must not go. It answers every request with one status (401 with a Basic challenge by
default, under the header name given: `WWW-Authenticate` or `Www-Authenticate`).

    with header_logging_registry() as fake:
        ...                       # name fake.host as a registry
        fake.authorizations()     # the Authorization headers it received
"""

from __future__ import annotations

import contextlib
import http.server
from collections.abc import Iterator
from dataclasses import dataclass, field

from tests.services._common import serving


@dataclass
class HeaderLog:
    host: str  # "localhost:PORT"
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    def authorizations(self) -> list[str]:
        return [value for _, _, headers in self.requests for name, value in headers.items()
                if name.lower() == "authorization"]  # fmt: skip


@contextlib.contextmanager
def header_logging_registry(
    status: int = 401, challenge_header: str = "WWW-Authenticate"
) -> Iterator[HeaderLog]:
    log = HeaderLog(host="")

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            log.requests.append((self.command, self.path, dict(self.headers.items())))
            self.send_response(status)
            if status == 401:
                self.send_header(challenge_header, 'Basic realm="fake"')
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = _answer

        def log_message(self, *args: object) -> None:  # quiet
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    log.host = f"localhost:{server.server_address[1]}"
    with serving(server):
        yield log
