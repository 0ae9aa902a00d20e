"""The one credential policy for container registries: given a registry host, the
credentials that host may receive. Every call that talks to a registry (the push to
ECR, the base-image checks of a build, the CUDA gate's manifest reads, the CodeBuild
cache pull) asks here; a host that gets nothing is talked to anonymously, and the
caller's result says so.

- The ECR login token goes only to the account's own ECR registry: the host of the
  token's `proxyEndpoint` (`<account>.dkr.ecr.<region>.amazonaws.com`), or the host that
  FSDP_EKS_ECR_REGISTRY_HOST names as ECR's data plane (a proxy in front of ECR; the
  local distribution registry on the test stack).
- REGISTRY_USERNAME / REGISTRY_PASSWORD go only to the hosts REGISTRY_HOST names
  (comma-separated).
- The docker config (`docker login`, credential helpers) is keyed by host already: its
  entry for that host, as Docker itself would send it.
"""

from __future__ import annotations

import base64
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

ECR_REGISTRY_HOST_ENV = "FSDP_EKS_ECR_REGISTRY_HOST"
# An account's ECR registry host (its images: <host>/<repository>[:tag]).
ECR_HOST_PATTERN = r"(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?"
ECR_HOST = re.compile(rf"^{ECR_HOST_PATTERN}$")
REGISTRY_HOST_ENV = "REGISTRY_HOST"
USERNAME_ENV = "REGISTRY_USERNAME"
PASSWORD_ENV = "REGISTRY_PASSWORD"
ANONYMOUS = "anonymous"
_HUB_ALIASES = {"docker.io", "index.docker.io", "registry-1.docker.io"}

Source = Literal["ecr", "environment", "docker_config"]


@dataclass(frozen=True)
class RegistryLogin:
    """Credentials one host may receive. The password never appears in a repr."""

    username: str
    password: str = field(repr=False)
    source: Source

    def basic(self) -> str:
        """The value of an `Authorization: Basic` header."""
        pair = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(pair).decode()

    def auth_config(self) -> dict[str, str]:
        """The docker SDK's auth_config for a push or pull."""
        return {"username": self.username, "password": self.password}


@dataclass(frozen=True)
class EcrToken:
    """An ECR login (get_authorization_token): for its proxy endpoint's host only."""

    endpoint_host: str
    username: str
    password: str = field(repr=False)


def ecr_login(ecr: Any) -> EcrToken:
    """The login from an ECR client's get_authorization_token, for its proxy endpoint's
    host. The password is a secret: it only goes into auth headers the credential
    policy allows, never into a result, log or message."""
    data = ecr.get_authorization_token()["authorizationData"][0]
    user, _, password = base64.b64decode(data["authorizationToken"]).decode().partition(":")
    return EcrToken(str(data.get("proxyEndpoint") or ""), user, password)


def normalize_host(host: str) -> str:
    """`host[:port]` as compared: no scheme, no path, lower case, Docker Hub's names as one."""
    text = host.strip().lower().removeprefix("https://").removeprefix("http://")
    text = text.split("/", 1)[0]
    return "docker.io" if text in _HUB_ALIASES else text


def ecr_hosts(token: EcrToken, environ: Mapping[str, str] = os.environ) -> frozenset[str]:
    """The hosts the ECR token may go to: its own endpoint and the configured data plane."""
    hosts = {normalize_host(token.endpoint_host)}
    if mapped := environ.get(ECR_REGISTRY_HOST_ENV, "").strip():
        hosts.add(normalize_host(mapped))
    return frozenset(hosts)


def named_hosts(environ: Mapping[str, str] = os.environ) -> frozenset[str]:
    """The hosts REGISTRY_HOST names, for REGISTRY_USERNAME/REGISTRY_PASSWORD."""
    names = environ.get(REGISTRY_HOST_ENV, "").split(",")
    return frozenset(normalize_host(name) for name in names if name.strip())


def credentials_for(
    host: str, ecr: EcrToken | None = None, environ: Mapping[str, str] = os.environ
) -> RegistryLogin | None:
    """The credentials `host` may receive (None: talk to it anonymously). `ecr` is the
    ECR login the caller holds, if any; it is offered to no other host."""
    wanted = normalize_host(host)
    if ecr is not None and wanted in ecr_hosts(ecr, environ):
        return RegistryLogin(ecr.username, ecr.password, "ecr")
    user, password = environ.get(USERNAME_ENV), environ.get(PASSWORD_ENV)
    if user and password and wanted in named_hosts(environ):
        return RegistryLogin(user, password, "environment")
    return _docker_config(wanted)


def source_of(login: RegistryLogin | None) -> str:
    """What a result says about the credentials used: their source, or `anonymous`."""
    return ANONYMOUS if login is None else login.source


def _docker_config(host: str) -> RegistryLogin | None:
    """The docker config's entry for `host` (its helpers included); None when it has
    none, or the config cannot be read."""
    try:
        import docker.auth

        config = docker.auth.load_config()
        names = [host] + (["https://index.docker.io/v1/"] if host == "docker.io" else [])
        for name in names:
            found = config.resolve_authconfig(name)
            if found and found.get("username") and found.get("password"):
                return RegistryLogin(
                    str(found["username"]), str(found["password"]), "docker_config"
                )
    except Exception:  # noqa: BLE001 - an unreadable config or a failing helper: anonymous
        return None
    return None


__all__ = [
    "ANONYMOUS",
    "ECR_REGISTRY_HOST_ENV",
    "REGISTRY_HOST_ENV",
    "EcrToken",
    "RegistryLogin",
    "credentials_for",
    "normalize_host",
    "source_of",
]
