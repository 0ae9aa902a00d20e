"""The one HTTP client for container registries (manifest and blob reads, the token
flow, the push's digest check): credentials go only where they were issued, and no
answer is read unbounded.

- Credentials (the `authorization` given: Basic, Bearer) travel with a redirect only to
  the same origin (scheme, host, port) as the request they were given for; a redirect to
  another host or port (a blob store, a hostile registry's second host), or from HTTPS
  down to HTTP, gets none. urllib alone keeps `Authorization` on every redirect.
- A body is read up to `max_bytes` and within `deadline_s` in all: an endless or
  dripping body is `AnswerTooLarge` (a ValueError), never a MemoryError or a hang.

Which credentials a host may receive at all is skills.cloud.registry_credentials'."""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from email.message import Message
from typing import Any

TIMEOUT_S = 15.0  # each connect and read
DEADLINE_S = 60.0  # a whole answer, however slowly it drips
MAX_BODY = 8 * 1024 * 1024  # manifests and image configs are kilobytes
_CHUNK = 64 * 1024
# Headers that carry credentials (ours or a server's cookies): never sent off-origin.
CREDENTIAL_HEADERS = ("authorization", "proxy-authorization", "cookie")


class AnswerTooLarge(ValueError):
    """A registry answered more than the client reads, or took longer than it waits."""


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Message  # case-insensitive lookups, as HTTP header names are
    body: bytes
    url: str  # where the answer came from, after redirects


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) with the scheme's default port made explicit."""
    parts = urllib.parse.urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


class _CredentialsStayHome(urllib.request.HTTPRedirectHandler):
    """Follows redirects as urllib does, minus the credentials on any hop that leaves
    the origin they were given for (or goes from HTTPS to HTTP)."""

    def redirect_request(
        self, req: urllib.request.Request, fp: Any, code: int, msg: str, headers: Any, newurl: str
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is None:
            return None
        issued = getattr(req, "credentials_origin", origin(req.full_url))
        if origin(new.full_url) != issued:
            for name in list(new.headers):
                if name.lower() in CREDENTIAL_HEADERS:
                    del new.headers[name]
            issued = None  # once dropped, never put back (a hop back home included)
        new.credentials_origin = issued  # type: ignore[attr-defined]
        return new


_OPENER = urllib.request.build_opener(_CredentialsStayHome)


def _read(response: Any, max_bytes: int, deadline: float, url: str) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = response.read(min(_CHUNK, max_bytes + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > max_bytes:
            raise AnswerTooLarge(f"{_host(url)} answered more than {max_bytes} bytes")
        if time.monotonic() > deadline:
            raise AnswerTooLarge(f"{_host(url)} took more than {DEADLINE_S:.0f} s to answer")


def _host(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc


def request(
    url: str,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    authorization: str | None = None,
    max_bytes: int = MAX_BODY,
    timeout: float = TIMEOUT_S,
) -> Answer:
    """One request; an error status is an Answer too (the caller reads 401s and 404s).
    `authorization` is the Authorization header's value, for this URL's origin only.
    Network failures raise OSError (urllib's URLError is one)."""
    outgoing = urllib.request.Request(url, method=method, headers=dict(headers or {}))
    if authorization:
        outgoing.add_header("Authorization", authorization)
    deadline = time.monotonic() + DEADLINE_S
    try:
        response = _OPENER.open(outgoing, timeout=timeout)
    except urllib.error.HTTPError as exc:
        with exc:
            body = b"" if method == "HEAD" else _read(exc, max_bytes, deadline, url)
            return Answer(exc.code, exc.headers, body, exc.geturl() or url)
    with response:
        body = b"" if method == "HEAD" else _read(response, max_bytes, deadline, url)
        return Answer(response.status, response.headers, body, response.geturl() or url)


__all__ = ["Answer", "AnswerTooLarge", "MAX_BODY", "origin", "request"]
