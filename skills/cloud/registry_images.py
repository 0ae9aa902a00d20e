"""Images in registries, as Docker names them: an image reference parsed (ImageRef), and
the manifest request `docker manifest inspect` makes (does a tag exist; a repository's
tags), with the credentials skills.cloud.registry_credentials allows for the host (never
from tool arguments, never in results or errors; any other registry is asked
anonymously, and the check says so). The image builder, the ECR publisher and the CUDA
gate all read registries through here."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
from dataclasses import dataclass
from email.message import Message

from skills.cloud import registry_http
from skills.cloud.registry_credentials import (
    EcrToken,
    RegistryLogin,
    credentials_for,
    source_of,
)

DOCKER_HUB = "docker.io"
_HUB_ALIASES = {"docker.io", "index.docker.io", "registry-1.docker.io"}
_HUB_API = "registry-1.docker.io"
MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
TIMEOUT_S = 15.0

# A registry host: with a dot or a port, or localhost.
HOST_PATTERN = r"(?:localhost|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+|[A-Za-z0-9-]+:\d+)(?::\d+)?"


@dataclass(frozen=True)
class ImageRef:
    registry: str  # "docker.io", "localhost:5000", "nvcr.io"
    repository: str  # "pytorch/pytorch", "library/ubuntu"
    tag: str
    digest: str | None = None

    @property
    def reference(self) -> str:
        return self.digest or self.tag

    def __str__(self) -> str:
        name = f"{self.registry}/{self.repository}"
        return f"{name}@{self.digest}" if self.digest else f"{name}:{self.tag}"

    @property
    def on_docker_hub(self) -> bool:
        return self.registry == DOCKER_HUB


def parse_image(image: str) -> ImageRef:
    """An image reference as Docker reads it (default registry docker.io, official images
    under library/, default tag latest)."""
    name, at, after = image.partition("@")
    digest = after if at else None
    tag = "latest"
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = name.rsplit(":", 1)
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, repository = first, rest
    else:
        registry, repository = DOCKER_HUB, name
    if registry in _HUB_ALIASES:
        registry = DOCKER_HUB
        if "/" not in repository:
            repository = f"library/{repository}"
    return ImageRef(registry, repository, tag, digest)


# --- the manifest request ---------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    image: str
    exists: bool | None  # None: could not tell (unreachable, refused)
    status: int | None
    message: str  # the registry's own answer, one line
    credentials: str = "anonymous"  # what was sent: a credential source, or anonymous

    @property
    def missing(self) -> bool:
        return self.exists is False


def registry_scheme(registry: str) -> str:
    host = registry.split(":")[0]
    return "http" if host in ("localhost", "127.0.0.1") or host.endswith(".localhost") else "https"


def _api_host(registry: str) -> str:
    return _HUB_API if registry == DOCKER_HUB else registry


def _challenge(header: str) -> tuple[str, dict[str, str]]:
    scheme, _, params = header.partition(" ")
    return scheme.lower(), dict(re.findall(r'(\w+)="([^"]*)"', params))


def _bearer_token(
    params: dict[str, str], repository: str, creds: RegistryLogin | None
) -> str | None:
    """The anonymous (or credentialed) token flow of Docker Hub-like registries."""
    realm = params.get("realm")
    if not realm:
        return None
    query = {"scope": params.get("scope") or f"repository:{repository}:pull"}
    if params.get("service"):
        query["service"] = params["service"]
    answer = registry_http.request(
        f"{realm}?{urllib.parse.urlencode(query)}",
        authorization=creds.basic() if creds and _private_channel(realm) else None,
    )
    if answer.status != 200:
        return None
    body = json.loads(answer.body or b"{}")
    token = (body.get("token") or body.get("access_token")) if isinstance(body, dict) else None
    return token if isinstance(token, str) else None


def _private_channel(url: str) -> bool:
    """Whether credentials may travel to `url` (a token realm the registry names): over
    HTTPS, or plain HTTP on this host only."""
    parts = urllib.parse.urlsplit(url)
    return parts.scheme == "https" or (
        parts.scheme == "http" and registry_scheme(parts.netloc) == "http"
    )


def _registry_message(body: bytes, status: int) -> str:
    try:
        errors = json.loads(body).get("errors") or []
        return "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors) or str(status)
    except (ValueError, AttributeError, TypeError, RecursionError):
        return f"HTTP {status}"


def _request(url: str, authorization: str | None) -> tuple[int, Message, bytes]:
    """(status, headers, body) through the one registry client (credentials stay with
    this URL's origin across redirects; the body is read bounded)."""
    answer = registry_http.request(
        url, headers={"Accept": MANIFEST_TYPES}, authorization=authorization
    )
    return answer.status, answer.headers, answer.body


def registry_get(registry: str, repository: str, path: str) -> tuple[int, bytes, str]:
    """GET /v2/<repository>/<path> with the registry's auth flow: (status, body, url)."""
    status, body, url, _ = registry_get_as(registry, repository, path)
    return status, body, url


def registry_get_as(
    registry: str, repository: str, path: str, *, ecr: EcrToken | None = None
) -> tuple[int, bytes, str, str]:
    """registry_get, and which credentials were sent (a source, or `anonymous`): only
    those the credential policy allows for this registry's host (`ecr`: the ECR login
    the caller holds, which the policy gives only to the account's registry)."""
    url = f"{registry_scheme(registry)}://{_api_host(registry)}/v2/{repository}/{path}"
    creds = credentials_for(registry, ecr)
    status, headers, body = _request(url, None)
    sent = None
    if status == 401:
        scheme, params = _challenge(headers.get("WWW-Authenticate", ""))
        if scheme == "bearer":
            token = _bearer_token(params, repository, creds)
            sent = creds
            if token:
                status, headers, body = _request(url, f"Bearer {token}")
        elif scheme == "basic" and creds:
            sent = creds
            status, headers, body = _request(url, creds.basic())
    return status, body, url, source_of(sent)


def check_image(image: str) -> Check:
    """Whether `image` exists in its registry: GET /v2/<name>/manifests/<tag>."""
    ref = parse_image(image)
    path = f"manifests/{ref.reference}"
    try:
        status, body, url, sent = registry_get_as(ref.registry, ref.repository, path)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return Check(image, None, None, f"cannot reach {ref.registry}: {reason}")
    how = f" (credentials: {sent})"
    if status == 200:
        return Check(image, True, status, "manifest found" + how, sent)
    message = f"GET {url}: {status} {_registry_message(body, status)}" + how
    if status == 404:
        return Check(image, False, status, message, sent)
    return Check(image, None, status, message, sent)


def list_tags(repository_ref: str) -> list[str]:
    """The tags of `REGISTRY/REPO` ([] when the registry has none or cannot tell)."""
    ref = parse_image(repository_ref + ":x")
    try:
        status, body, _ = registry_get(ref.registry, ref.repository, "tags/list")
    except (urllib.error.URLError, OSError, ValueError):
        return []
    if status != 200:
        return []
    try:
        tags = json.loads(body or b"{}").get("tags") or []
    except (ValueError, AttributeError, RecursionError):
        return []
    return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []
