"""The Kubernetes side: which API client to use, batched reads as plain JSON (one list
per kind, never one call per node), and server-side apply of manifests.

Raw JSON (not the generated models) because the checks read objects the way the API
returns them (camelCase: skills.shared.gpu_nodes reads Nodes so), and because a
custom resource has no model anyway."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from skills.shared.errors import ErrorCode, ToolFailure

FIELD_MANAGER = "fsdp-eks"
REQUEST_TIMEOUT = (5, 30)  # connect, read (seconds)

# kind -> (API path prefix, plural, namespaced): what the component table applies.
KINDS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Service": ("/api/v1", "services", True),
    "Secret": ("/api/v1", "secrets", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "DaemonSet": ("/apis/apps/v1", "daemonsets", True),
    "Deployment": ("/apis/apps/v1", "deployments", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "CustomResourceDefinition": (
        "/apis/apiextensions.k8s.io/v1",
        "customresourcedefinitions",
        False,
    ),
    "PyTorchJob": ("/apis/kubeflow.org/v1", "pytorchjobs", True),
    "ValidatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        False,
    ),
}


def object_path(obj: dict[str, Any]) -> str:
    kind = obj["kind"]
    prefix, plural, namespaced = KINDS[kind]
    meta = obj["metadata"]
    where = f"/namespaces/{meta['namespace']}" if namespaced else ""
    return f"{prefix}{where}/{plural}/{meta['name']}"


def api_client(
    cluster_name: str | None,
    region: str | None,
    profile: str | None,
    kubeconfig: str | None,
    context: str | None,
) -> Any:
    """An explicit kubeconfig/context wins (any cluster, a proxy, a test API); else the
    EKS cluster by name (token in memory); else KUBECONFIG's current context."""
    from skills.shared.clients import kube_api_client

    if kubeconfig or context or not cluster_name:
        return kube_api_client(kubeconfig, context)
    from skills.eks_cluster_manager.access import eks_api_client

    return eks_api_client(cluster_name, region, profile)


@dataclass
class Kube:
    """One cluster's API, counting the requests it makes."""

    client: Any
    calls: int = 0
    paths: list[str] = field(default_factory=list)

    @property
    def host(self) -> str:
        return self.client.configuration.host

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
        raw: bool = False,
    ) -> Any:
        from kubernetes.client.exceptions import ApiException

        self.calls += 1
        self.paths.append(f"{method} {path}")
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        params = self.client.param_serialize(
            method,
            path,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self.client.call_api(*params, _request_timeout=REQUEST_TIMEOUT)
            response.read()
        except (ApiException, ToolFailure):  # ToolFailure: the token refresh (credentials)
            raise
        except Exception as exc:  # urllib3: refused, DNS, TLS, timeout
            raise ToolFailure(
                ErrorCode.ENDPOINT_UNREACHABLE,
                f"Cannot reach the Kubernetes API at {self.host}.",
                "Check the cluster endpoint's access (public/private), the network and "
                "the kubeconfig context.",
                {"host": self.host, "error": type(exc).__name__},
            ) from None
        if not 200 <= response.status < 300:
            raise ApiException(http_resp=response)
        data = response.data.decode() if isinstance(response.data, bytes) else response.data
        return data if raw else json.loads(data or "null")

    def get(self, path: str, query: list[tuple[str, str]] | None = None) -> dict[str, Any]:
        return self.request("GET", path, query=query)

    def get_or_none(self, path: str) -> dict[str, Any] | None:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.get(path)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def items(self, path: str, query: list[tuple[str, str]] | None = None) -> list[dict]:
        """A list (all pages); a kind the server does not serve is an empty list."""
        from kubernetes.client.exceptions import ApiException

        found: list[dict[str, Any]] = []
        token = ""
        while True:
            params = [*(query or []), ("limit", "500")] + ([("continue", token)] if token else [])
            try:
                page = self.get(path, params)
            except ApiException as exc:
                if exc.status == 404:
                    return found
                raise
            found += page.get("items") or []
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return found

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply (creates or updates; this tool owns the fields it sets)."""
        return self.request(
            "PATCH",
            object_path(obj),
            body=obj,
            query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
            content_type="application/apply-patch+yaml",
        )


def access_failure(exc: Any, host: str) -> ToolFailure | None:
    """401/403 from the API: the caller's identity has no access."""
    status = getattr(exc, "status", None)
    if status in (401, 403):
        return ToolFailure(
            ErrorCode.ACCESS_DENIED,
            f"The Kubernetes API at {host} answered {status} for the caller's identity.",
            "Give the IAM identity access: `aws eks create-access-entry` and "
            "`associate-access-policy` (AmazonEKSClusterAdminPolicy), or the aws-auth ConfigMap.",
            {"host": host, "status": status},
        )
    return None
