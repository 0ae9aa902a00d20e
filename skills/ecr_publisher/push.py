"""The push: tag, log in with the ECR token, push (every stream entry checked), verify the
digest the registry serves, return the ECR URIs. The ECR token goes only where the
credential policy (skills.cloud.registry_credentials) allows: the account's own ECR
host, or the data plane FSDP_EKS_ECR_REGISTRY_HOST names. A `registry_host` it does not
allow is pushed to anonymously, and the result (or the error) says so."""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from typing import Any

from skills.cloud import registry_http
from skills.cloud.clients import docker_client, service_regions
from skills.cloud.ecr_repository import ecr_client, ensure_repository
from skills.cloud.registry_credentials import (
    ECR_REGISTRY_HOST_ENV,
    RegistryLogin,
    credentials_for,
    ecr_login,
    source_of,
)
from skills.cloud.registry_images import MANIFEST_TYPES, registry_scheme
from skills.ecr_publisher.models import PushResult
from skills.operations import remembered
from skills.shared.confirm import require_confirm
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.progress import NullProgress, Progress
from skills.shared.secrets import redact

REGISTRY_HOST_ENV = ECR_REGISTRY_HOST_ENV
TIMEOUT_S = 30.0


@dataclass(frozen=True)
class PushOptions:
    image: str
    repository: str
    region: str
    tag: str | None = None
    scan_on_push: bool | None = None
    immutable_tags: bool | None = None
    keep_last: int | None = None
    confirm: bool = False
    registry_host: str | None = None


def known_region(region: str) -> None:
    known = service_regions("ecr")
    if known and region not in known:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"region {region!r} is not an AWS region with ECR.",
            "Pass a region such as us-east-1 (see `aws ec2 describe-regions`).",
            {"problems": [{"field": "region", "problem": "unknown region"}]},
        )


def image_tag(image: str) -> str:
    """The tag of a local image reference (`latest` when it names none)."""
    from docker.utils import parse_repository_tag

    name, tag = parse_repository_tag(image)
    return tag if tag and not tag.startswith("sha256:") and "@" not in image else "latest"


def manifest_digest(
    host: str, repository: str, tag: str, login: RegistryLogin | None
) -> str | None:
    """The registry's Docker-Content-Digest of <repository>:<tag> (None: no such tag),
    through the one registry client: the login stays with `host` across redirects."""
    url = f"{registry_scheme(host)}://{host}/v2/{repository}/manifests/{tag}"
    try:
        answer = registry_http.request(
            url,
            method="HEAD",
            headers={"Accept": MANIFEST_TYPES},
            authorization=login.basic() if login is not None else None,
        )
    except OSError as exc:
        raise ToolFailure(
            ErrorCode.ENDPOINT_UNREACHABLE,
            f"Cannot reach the registry {host}: {exc}.",
            f"Check the network, or unset {REGISTRY_HOST_ENV} / registry_host.",
            {"registry": host},
        ) from None
    if answer.status == 404:
        return None
    if answer.status in (401, 403):
        raise _refused(host, f"HTTP {answer.status}", login)
    if answer.status >= 300:
        raise ToolFailure(
            ErrorCode.SERVICE_ERROR,
            f"The registry {host} answered HTTP {answer.status}.",
            "Retry; if it persists, check the registry's health.",
            {"registry": host},
        )
    return answer.headers.get("Docker-Content-Digest")


def _refused(host: str, said: str, login: RegistryLogin | None) -> ToolFailure:
    if login is None:
        return ToolFailure(
            ErrorCode.ACCESS_DENIED,
            f"The registry {host} refused an anonymous request ({said}): the ECR token goes "
            "only to the account's own ECR registry.",
            f"Push to the account's ECR host, or set {REGISTRY_HOST_ENV}={host} if that host "
            "is ECR's data plane (a proxy you run).",
            {"registry": host, "registry_credentials": source_of(login)},
        )
    return ToolFailure(
        ErrorCode.ACCESS_DENIED,
        f"The registry {host} refused the ECR login ({said}).",
        "Check the credentials' ecr:GetAuthorizationToken and push permissions, and "
        f"that {REGISTRY_HOST_ENV} (registry_host) names the right registry.",
        {"registry": host, "registry_credentials": source_of(login)},
    )


_DIGEST = re.compile(r"digest: (sha256:[0-9a-f]{64})")


class _Layers:
    """Bytes per layer, reported as one total: from the push stream's progressDetail
    (Docker), else (podman streams none) each layer's size from the image history,
    reported as the push completes."""

    def __init__(self, progress: Progress, known: list[tuple[str, int]]) -> None:
        self.progress = progress
        self.known = known
        self.sizes: dict[str, tuple[int, int]] = {}

    def finish(self) -> None:
        if self.sizes or not self.known:
            return
        total = sum(size for _, size in self.known)
        done = 0
        for layer, size in self.known:
            done += size
            self.sizes[layer] = (size, size)
            self.progress.report(done, total, f"layer {layer[:12]}: {size} bytes pushed")

    def update(self, entry: dict) -> None:
        layer, detail = entry.get("id"), entry.get("progressDetail") or {}
        if not layer:
            return
        current, total = int(detail.get("current") or 0), int(detail.get("total") or 0)
        done, size = self.sizes.get(layer, (0, 0))
        if str(entry.get("status", "")).lower() in ("pushed", "layer already exists"):
            current = max(current, done, size)
        self.sizes[layer] = (max(done, current), max(size, total, current))
        done_all = sum(d for d, _ in self.sizes.values())
        total_all = sum(s for _, s in self.sizes.values()) or None
        self.progress.report(done_all, total_all, f"layer {layer[:12]}: {entry.get('status', '')}")


def image_layers(client: Any, image: str) -> list[tuple[str, int]]:
    """(id, bytes) of each non-empty layer, base first."""
    history = client.api.history(image) or []
    found = [
        (str(h.get("Id") or f"layer-{i}"), int(h.get("Size") or 0))
        for i, h in enumerate(reversed(history))
    ]
    return [(layer, size) for layer, size in found if size > 0]


def _push(
    client: Any,
    ref: str,
    tag: str,
    login: RegistryLogin | None,
    progress: Progress,
    known: list[tuple[str, int]] | None = None,
) -> tuple[str | None, _Layers]:
    """Push through the Engine API, with `login` or anonymously (None). The SDK does not
    raise on a failed push: every entry is checked for `error`/`errorDetail`."""
    layers = _Layers(progress, known or [])
    digest = None
    # auth_config None: the SDK sends the docker config's entry for this host, if any.
    auth_config = login.auth_config() if login else None
    stream = client.api.push(ref, tag=tag, stream=True, decode=True, auth_config=auth_config)
    secret = [login.password] if login else []
    for entry in stream:
        if "error" in entry or "errorDetail" in entry:
            text = redact(
                str(entry.get("error") or entry["errorDetail"].get("message", "")), secret
            )
            lowered = text.lower()
            if any(
                w in lowered for w in ("unauthorized", "authentication", "denied", "401", "403")
            ):
                if login is None:
                    raise _refused(ref.split("/", 1)[0], text, login)
                raise ToolFailure(
                    ErrorCode.ACCESS_DENIED,
                    f"The registry refused the push of {ref}:{tag}: {text}",
                    "Check the credentials' ECR push permissions (ecr:InitiateLayerUpload, "
                    "ecr:PutImage...) and that registry_host names the right registry.",
                    {"pushed_to": f"{ref}:{tag}"},
                )
            raise ToolFailure(
                ErrorCode.SERVICE_ERROR,
                f"The push of {ref}:{tag} failed: {text}",
                "Check that the Docker engine can reach the registry (and trusts it), then retry.",
                {"pushed_to": f"{ref}:{tag}"},
            )
        aux = entry.get("aux") or {}
        found = _DIGEST.search(str(entry.get("status", "")))  # podman: "TAG: digest: ..."
        digest = aux.get("Digest") or (found[1] if found else None) or digest
        layers.update(entry)
    layers.finish()
    return digest, layers


def _existing_tag(host: str, repo: Any, tag: str, login: Any, confirm: bool) -> str | None:
    """The digest `tag` names now, if any: an immutable repository refuses to move it, a
    mutable one moves it only with confirm."""
    existing = manifest_digest(host, repo.name, tag, login)
    if existing and repo.immutable:
        raise ToolFailure(
            ErrorCode.CONFLICT,
            f"Tag {tag!r} already exists in the immutable repository {repo.name!r}.",
            "Push under a new tag (e.g. build_image tag_strategy semantic or git-sha).",
            {"tag": tag, "existing_digest": existing},
        )
    if existing:
        require_confirm(
            confirm,
            f"Tag {tag!r} already exists in {repo.name!r} ({existing[:19]}); pushing moves it.",
            "to overwrite, or use a new tag",
            {"tag": tag, "existing_digest": existing},
        )
    return existing


def _served_digest(
    host: str, repository: str, tag: str, login: Any, pushed_digest: str | None
) -> str:
    """What the registry serves for the tag after the push: it must be what was pushed."""
    served = manifest_digest(host, repository, tag, login)
    if served is None or (pushed_digest and served != pushed_digest):
        ref = f"{host}/{repository}"
        raise ToolFailure(
            ErrorCode.SERVICE_ERROR,
            f"The push of {ref}:{tag} reported success but the registry serves "
            f"{served or 'no such tag'} (pushed {pushed_digest or 'unknown'}).",
            "Retry the push; if it repeats, check the registry (or proxy) in between.",
            {"pushed_to": f"{ref}:{tag}", "served_digest": served},
        )
    return served


def publish(options: PushOptions, progress: Progress | None = None) -> PushResult:
    progress = progress or NullProgress()
    started = time.monotonic()
    known_region(options.region)
    client = docker_client()
    import docker.errors

    try:
        client.api.inspect_image(options.image)
    except docker.errors.ImageNotFound:
        raise ToolFailure(
            ErrorCode.NOT_FOUND,
            f"No local image {options.image!r}.",
            "Build it first (build_image) or pass the name `docker images` shows.",
            {"problems": [{"field": "image", "problem": "no such local image"}]},
        ) from None
    tag = options.tag or image_tag(options.image)
    progress.report(0, None, f"repository {options.repository}")
    ecr = ecr_client(options.region)
    repo = ensure_repository(
        ecr,
        options.repository,
        scan_on_push=options.scan_on_push,
        immutable_tags=options.immutable_tags,
        keep_last=options.keep_last,
    )
    ecr_host = repo.uri.split("/", 1)[0]
    host = (options.registry_host or os.environ.get(REGISTRY_HOST_ENV) or ecr_host).strip()
    host = host.removeprefix("https://").removeprefix("http://").rstrip("/")
    login = credentials_for(host, ecr_login(ecr))

    existing = _existing_tag(host, repo, tag, login, options.confirm)

    ref = f"{host}/{repo.name}"
    client.api.tag(options.image, ref, tag=tag)
    known = image_layers(client, options.image)
    total = sum(size for _, size in known)
    progress.report(0, total or None, f"pushing {len(known)} layers to {ref}:{tag}")
    pushed_digest, layers = _push(client, ref, tag, login, progress, known)
    served = _served_digest(host, repo.name, tag, login, pushed_digest)
    # No put_image into ECR here: on AWS the push above is what records the image (a
    # put_image would be a second write of the same manifest, and fails on immutable
    # tags). Only the local test stack lacks a data plane behind moto; its tests record
    # images in moto themselves, playing ECR's part.
    progress.report(1, 1, f"pushed {served}")
    # The default repository for a deploy that names no image (ECR_REPOSITORY wins).
    remembered.remember(repo.name, options.region, "push_to_ecr")
    return PushResult(
        image_uri=f"{repo.uri}:{tag}",
        image_uri_digest=f"{repo.uri}@{served}",
        digest=served,
        repository=repo.name,
        region=options.region,
        tag=tag,
        pushed_to=f"{ref}:{tag}",
        registry_credentials=source_of(login),
        repository_action=repo.action,
        repository_changes=repo.changes,
        scan_on_push=repo.scan_on_push,
        immutable_tags=repo.immutable,
        keep_last=repo.keep_last,
        overwrote_tag=bool(existing),
        layers=len(layers.sizes),
        bytes_pushed=sum(s for _, s in layers.sizes.values()),
        duration_s=round(time.monotonic() - started, 3),
    )
