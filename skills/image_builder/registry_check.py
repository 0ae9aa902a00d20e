"""Base images before a build: which images a Dockerfile's FROM lines name, the same
text with Docker Hub names pulled through a mirror, and whether a tag exists (a
registry manifest request, the same one `docker manifest inspect` makes).

Mirror (`base_mirror` / FSDP_EKS_BASE_MIRROR): `HOST[:PORT][/PREFIX]`, e.g.
`localhost:5000` or an ECR pull-through cache
`<acct>.dkr.ecr.<region>.amazonaws.com/docker-hub`. A Docker Hub name is rewritten to
`<mirror>/<namespace>/<name>:<tag>`, official images with their `library/` namespace
(`ubuntu:22.04` -> `<mirror>/library/ubuntu:22.04`, as ECR's pull-through cache wants
them). Only the text sent to the daemon changes; the user's Dockerfile is not edited.

Credentials for a registry are the ones skills.cloud.registry_credentials allows for
its host (REGISTRY_USERNAME + REGISTRY_PASSWORD only for the hosts REGISTRY_HOST names;
the docker config's entry for that host), never from tool arguments, and never appear
in results or errors; any other registry is asked anonymously, and the check says so.
"""

from __future__ import annotations

import json
import os
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
from skills.image_builder import dockerfile_reader
from skills.shared.errors import ErrorCode, ToolFailure

MIRROR_ENV = "FSDP_EKS_BASE_MIRROR"
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

# HOST[:PORT][/PREFIX]: a registry host (with a dot or a port, or localhost) and an
# optional repository prefix of lowercase path components.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
HOST_PATTERN = r"(?:localhost|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+|[A-Za-z0-9-]+:\d+)(?::\d+)?"
MIRROR_PATTERN = rf"^{HOST_PATTERN}(?:/{_COMPONENT})*$"
_FROM_KEYWORD = re.compile(r"^\s*FROM\b", re.IGNORECASE)


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


def mirrored(image: str, mirror: str | None) -> str:
    """`image` pulled through `mirror` when it is a Docker Hub name; else unchanged."""
    if not mirror:
        return image
    ref = parse_image(image)
    if not ref.on_docker_hub:
        return image
    suffix = f"@{ref.digest}" if ref.digest else f":{ref.tag}"
    return f"{mirror.rstrip('/')}/{ref.repository}{suffix}"


def rewrite_from(
    text: str,
    mirror: str | None,
    build_args: dict[str, str] | None = None,
    base_image: str | None = None,
) -> tuple[str, list[tuple[str, str]]]:
    """The text to send to the daemon: the last FROM's image replaced by `base_image`
    when given, and every pulled image through `mirror`. Returns (text, [(image as the
    Dockerfile names it, image as pulled)]). The FROMs are dockerfile_reader's (ARGs,
    stages, `--platform`, continuations); only the image token of a FROM is edited."""
    lines = text.split("\n")  # as dockerfile-parse numbers them
    froms = dockerfile_reader.read(text, build_args).froms
    pulled: list[tuple[str, str]] = []
    for entry in froms:
        image = entry.image
        if base_image and entry.index == len(froms) - 1:
            image = base_image
        elif entry.is_stage_ref:
            continue
        target = mirrored(image, mirror)
        pulled.append((image, target))
        if target != entry.written:
            _replace_image(lines, entry, target)
    return "\n".join(lines), pulled


def _replace_image(lines: list[str], entry: dockerfile_reader.FromInstruction, image: str) -> None:
    """`image` where the FROM writes its image: the first whole token equal to it after
    the FROM keyword (only flags, which start with --, come between)."""
    token = re.compile(rf"(?<!\S){re.escape(entry.written)}(?!\S)")
    for number in range(entry.line - 1, entry.end_line):
        body = lines[number]
        start = 0
        if number == entry.line - 1 and (keyword := _FROM_KEYWORD.match(body)):
            start = keyword.end()
        if hit := token.search(body, start):
            lines[number] = body[: hit.start()] + image + body[hit.end() :]
            return


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


def mirror_setting(given: str | None) -> str | None:
    """The tool input, else FSDP_EKS_BASE_MIRROR; checked against HOST[:PORT][/PREFIX]."""
    value = given or os.environ.get(MIRROR_ENV) or None
    if value is None:
        return None
    value = value.strip().removeprefix("https://").removeprefix("http://").rstrip("/")
    if not re.fullmatch(MIRROR_PATTERN, value):
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"{MIRROR_ENV} is not a registry HOST[:PORT][/PREFIX].",
            "Set it like localhost:5000 or <acct>.dkr.ecr.<region>.amazonaws.com/docker-hub.",
            {"problems": [{"field": MIRROR_ENV, "problem": "not HOST[:PORT][/PREFIX]"}]},
        )
    return value
