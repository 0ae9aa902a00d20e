"""Reaching an EKS cluster's Kubernetes API without the aws CLI.

The bearer token is what `aws eks get-token` prints: `k8s-aws-v1.` followed by the
base64url (unpadded) of a presigned STS GetCallerIdentity URL whose signature covers
the `x-k8s-aws-id: <cluster>` header. EKS accepts it for 15 minutes; the client made
here keeps it in memory only and makes a new one before that.

    api = eks_api_client("my-cluster", region="us-east-1")  # kubernetes.client.ApiClient
    api = cluster_api_client(cluster_name, region, profile, kubeconfig, context)  # any

`write_kubeconfig` writes a context whose user runs this module as an exec credential
plugin (`python -m skills.kube.access --cluster-name C --region R`), so
kubectl and the kubernetes client get fresh tokens with no aws CLI either.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from skills.cloud.clients import aws_error_code, aws_session
from skills.operations.processes import SAFE_PATH_FLAGS, suite_env
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.files import atomic_write_text
from skills.shared.reading import ReadRefused, load_yaml

TOKEN_PREFIX = "k8s-aws-v1."
CLUSTER_ID_HEADER = "x-k8s-aws-id"
# EKS accepts a token for 15 minutes from its signing time; renew well before.
TOKEN_LIFETIME_S = 15 * 60
REFRESH_AFTER_S = 10 * 60
PRESIGN_EXPIRES_S = 60  # what aws-iam-authenticator and the aws CLI sign with


def _no_credentials() -> ToolFailure:
    return ToolFailure(
        ErrorCode.NO_CREDENTIALS,
        "No AWS credentials were found to sign an EKS token.",
        "Set AWS_PROFILE (after `aws configure` or `aws sso login`) or "
        "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, then call again.",
    )


def eks_token(cluster_name: str, session: Any) -> str:
    """A bearer token for `cluster_name` signed with `session`'s credentials."""
    if session.get_credentials() is None:
        raise _no_credentials()
    sts = session.client("sts", region_name=session.region_name or "us-east-1")

    def add_header(request: Any, **_: Any) -> None:
        request.headers[CLUSTER_ID_HEADER] = cluster_name

    sts.meta.events.register("before-sign.sts.GetCallerIdentity", add_header)
    url = sts.generate_presigned_url(
        "get_caller_identity", Params={}, ExpiresIn=PRESIGN_EXPIRES_S, HttpMethod="GET"
    )
    return TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


# --- the cluster as EKS describes it ---------------------------------------------------


@dataclass(frozen=True)
class ClusterInfo:
    name: str
    region: str
    arn: str
    endpoint: str
    ca_data: str  # base64 PEM, as EKS returns it
    version: str
    status: str
    raw: dict[str, Any]


def region_of(session: Any) -> str:
    if not session.region_name:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            "No AWS region is set.",
            "Pass region (e.g. us-east-1) or set AWS_REGION.",
            {"problems": [{"field": "region", "problem": "required"}]},
        )
    return session.region_name


def cluster_names(eks: Any) -> list[str]:
    names: list[str] = []
    for page in eks.get_paginator("list_clusters").paginate():
        names += page.get("clusters", [])
    return sorted(names)


def cluster_not_found(eks: Any, cluster_name: str, region: str) -> ToolFailure:
    """NOT_FOUND for a cluster EKS does not know, listing the clusters in the region."""
    known = cluster_names(eks)
    listed = ", ".join(known) if known else "none"
    return ToolFailure(
        ErrorCode.NOT_FOUND,
        f"No EKS cluster {cluster_name!r} in {region}; clusters there: {listed}.",
        "Pass one of the listed names, or the region the cluster is in (region / AWS_REGION).",
        {"cluster_name": cluster_name, "region": region, "clusters": known},
    )


def describe_cluster(cluster_name: str, session: Any) -> ClusterInfo:
    """EKS's view of the cluster; an unknown name lists the clusters in the region."""
    import botocore.exceptions

    region = region_of(session)
    if session.get_credentials() is None:
        raise _no_credentials()
    eks = session.client("eks")
    try:
        cluster = eks.describe_cluster(name=cluster_name)["cluster"]
    except botocore.exceptions.ClientError as exc:
        if aws_error_code(exc) != "ResourceNotFoundException":
            raise
        raise cluster_not_found(eks, cluster_name, region) from None
    return ClusterInfo(
        name=cluster["name"],
        region=region,
        arn=cluster.get("arn", ""),
        endpoint=cluster.get("endpoint", ""),
        ca_data=(cluster.get("certificateAuthority") or {}).get("data", ""),
        version=cluster.get("version", ""),
        status=cluster.get("status", ""),
        raw=cluster,
    )


# --- an API client with a token that renews itself ---------------------------------------


class TokenRefresher:
    """The kubernetes Configuration's refresh_api_key_hook: signs a new token when the
    current one is older than REFRESH_AFTER_S (checked before every request)."""

    def __init__(
        self,
        cluster_name: str,
        session: Any,
        clock: Callable[[], float] = time.monotonic,
        refresh_after_s: float = REFRESH_AFTER_S,
    ) -> None:
        self.cluster_name = cluster_name
        self.session = session
        self.clock = clock
        self.refresh_after_s = refresh_after_s
        self.signed_at: float | None = None
        self.renewals = 0
        self._lock = threading.Lock()

    def __call__(self, configuration: Any) -> None:
        with self._lock:
            now = self.clock()
            if self.signed_at is not None and now - self.signed_at < self.refresh_after_s:
                return
            configuration.api_key["authorization"] = eks_token(self.cluster_name, self.session)
            configuration.api_key_prefix["authorization"] = "Bearer"
            self.renewals += self.signed_at is not None
            self.signed_at = now


def ca_pem(ca_data: str) -> str:
    """The cluster CA as PEM text, held in memory (the kubernetes client verifies against
    `ca_cert_data`): a read writes no file, so a read-only server writes none.
    ValueError when it is not base64 of text."""
    return base64.b64decode(ca_data).decode("ascii")


def eks_api_client(cluster_name: str, region: str | None = None, profile: str | None = None) -> Any:
    """A kubernetes ApiClient for the EKS cluster: endpoint and CA from describe_cluster,
    a bearer token held in memory and renewed before its 15-minute expiry."""
    from kubernetes import client

    session = aws_session(profile, region)
    info = describe_cluster(cluster_name, session)
    configuration = client.Configuration()
    configuration.host = info.endpoint
    if info.ca_data:
        try:
            configuration.ca_cert_data = ca_pem(info.ca_data)
        except ValueError:  # not base64 at all: leave verification to the system CAs
            pass
    configuration.api_key = {}
    configuration.api_key_prefix = {}
    refresher = TokenRefresher(info.name, session)
    refresher(configuration)  # sign now: no credentials fails here, not on first request
    # The untyped client declares the hook as `= None`; it is the documented refresh hook.
    configuration.refresh_api_key_hook = refresher  # pyright: ignore[reportAttributeAccessIssue]
    return client.ApiClient(configuration)


def kube_api_client(
    kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None
) -> Any:
    """A kubernetes ApiClient from a kubeconfig path (default: KUBECONFIG) and context."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    path = os.fspath(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG") or None
    if path and os.pathsep not in path:
        read_kubeconfig(Path(path))  # a malformed file is KUBECONFIG_INVALID, not a crash
    try:
        api_config = client.Configuration()
        config.load_kube_config(config_file=path, context=context, client_configuration=api_config)
    except (ConfigException, FileNotFoundError) as exc:
        raise ToolFailure(
            ErrorCode.KUBECONFIG_INVALID,
            f"Cannot load kubeconfig{f' context {context!r}' if context else ''}.",
            "Run `aws eks update-kubeconfig --name CLUSTER` or set KUBECONFIG.",
            {"kubeconfig": path or "~/.kube/config"},
        ) from exc
    return client.ApiClient(api_config)


def cluster_api_client(
    cluster_name: str | None = None,
    region: str | None = None,
    profile: str | None = None,
    kubeconfig: str | None = None,
    context: str | None = None,
) -> Any:
    """A cluster's ApiClient: an explicit kubeconfig/context wins (any cluster, a proxy,
    a test API); else the EKS cluster by name (its token in memory, no aws CLI); else
    KUBECONFIG's current context."""
    if kubeconfig or context or not cluster_name:
        return kube_api_client(kubeconfig, context)
    return eks_api_client(cluster_name, region, profile)


# --- kubeconfig ----------------------------------------------------------------------------


# Real kubeconfigs are a few KiB; a large one is not read whole.
KUBECONFIG_MAX_BYTES = 4 * 2**20


def default_kubeconfig() -> Path:
    first = (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
    return Path(first).expanduser() if first else Path.home() / ".kube" / "config"


def _upsert(entries: list[dict[str, Any]], name: str, key: str, value: dict[str, Any]) -> None:
    for entry in entries:
        if entry.get("name") == name:
            entry[key] = value
            return
    entries.append({"name": name, key: value})


def exec_user(cluster_name: str, region: str, profile: str | None) -> dict[str, Any]:
    """The kubeconfig user: this module as an exec credential plugin (no aws CLI)."""
    args = [
        *SAFE_PATH_FLAGS,
        "-m",
        "skills.kube.access",
        "--cluster-name",
        cluster_name,
        "--region",
        region,
    ]
    env = [{"name": name, "value": value} for name, value in suite_env().items()]
    if profile:
        env.append({"name": "AWS_PROFILE", "value": profile})
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": sys.executable,
            "args": args,
            "env": env,
            "interactiveMode": "Never",
            "provideClusterInfo": False,
        }
    }


def _refuse_repointing(config: dict[str, Any], context: str, target: dict[str, Any]) -> None:
    """A context of that name that names another cluster or user stays as it is unless
    the caller confirms (an alias equal to an existing context would re-point it)."""
    for entry in config["contexts"]:
        current = entry.get("context") if isinstance(entry, dict) else None
        if isinstance(entry, dict) and entry.get("name") == context and current != target:
            raise ToolFailure(
                ErrorCode.CONFIRMATION_REQUIRED,
                f"Context {context!r} already exists and points elsewhere; it was left as is.",
                "Pass another context alias, or confirm=true to re-point it.",
                {"context": context, "points_to": current, "would_point_to": target},
            )


def read_kubeconfig(path: Path) -> dict[str, Any]:
    """The kubeconfig at `path` through the bounded reader, its clusters/users/contexts
    entries all mappings; anything else is KUBECONFIG_INVALID (never an AttributeError or
    UnicodeDecodeError from deep inside a loader)."""
    try:
        config = load_yaml(path, what="kubeconfig", max_bytes=KUBECONFIG_MAX_BYTES) or {}
    except ReadRefused as refused:
        raise _bad_kubeconfig(path, refused.problem) from None
    if not isinstance(config, dict):
        raise _bad_kubeconfig(path, "is not a mapping")
    for key in ("clusters", "users", "contexts"):
        entries = config.get(key)
        if entries is None:
            continue
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise _bad_kubeconfig(path, f"has a {key} entry that is not a mapping")
    return config


def _bad_kubeconfig(path: Path, problem: str) -> ToolFailure:
    return ToolFailure(
        ErrorCode.KUBECONFIG_INVALID,
        f"The kubeconfig {path} {problem}; it was left as it is.",
        "Fix or move the file, or pass another kubeconfig path.",
        {"kubeconfig": str(path), "problem": problem},
    )


def write_kubeconfig(
    info: ClusterInfo,
    path: Path,
    profile: str | None = None,
    alias: str | None = None,
    confirm: bool = False,
) -> tuple[str, bool]:
    """Add or update the cluster's cluster, user and context entries in `path` (other
    entries kept) and make it the current context. Returns (context name, created).
    Re-pointing an existing context at this cluster needs `confirm`."""
    import yaml

    created = not path.exists() and not path.is_symlink()
    config = {} if created else read_kubeconfig(path)
    name = info.arn or f"{info.region}/{info.name}"
    context = alias or name
    config.setdefault("apiVersion", "v1")
    config.setdefault("kind", "Config")
    config.setdefault("preferences", {})
    for key in ("clusters", "users", "contexts"):
        if not isinstance(config.get(key), list):
            config[key] = []
    cluster: dict[str, Any] = {"server": info.endpoint}
    if info.ca_data:
        cluster["certificate-authority-data"] = info.ca_data
    if not confirm:
        _refuse_repointing(config, context, {"cluster": name, "user": name})
    _upsert(config["clusters"], name, "cluster", cluster)
    _upsert(config["users"], name, "user", exec_user(info.name, info.region, profile))
    _upsert(config["contexts"], context, "context", {"cluster": name, "user": name})
    config["current-context"] = context
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, yaml.safe_dump(config, sort_keys=False), mode=0o600)
    return context, created


def exec_credential(cluster_name: str, region: str | None, profile: str | None) -> dict:
    """The ExecCredential a kubeconfig exec plugin prints."""
    token = eks_token(cluster_name, aws_session(profile, region))
    expires = datetime.now(timezone.utc) + timedelta(seconds=REFRESH_AFTER_S)
    return {
        "kind": "ExecCredential",
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "spec": {},
        "status": {
            "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "token": token,
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="EKS token as a kubeconfig exec credential.")
    parser.add_argument("--cluster-name", required=True)
    parser.add_argument("--region")
    parser.add_argument("--profile")
    args = parser.parse_args(argv)
    try:
        credential = exec_credential(args.cluster_name, args.region, args.profile)
    except ToolFailure as failure:
        print(f"error [{failure.code}]: {failure}", file=sys.stderr)
        return failure.exit_status
    print(json.dumps(credential))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
