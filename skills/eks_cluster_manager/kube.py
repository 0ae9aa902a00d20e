"""The Kubernetes side: which API client to use, batched reads as plain JSON (one list
per kind, never one call per node), and server-side apply of manifests.

Raw JSON (not the generated models) because the checks read objects the way the API
returns them (camelCase: skills.kube.gpu_nodes reads Nodes so), and because a
custom resource has no model anyway."""

from __future__ import annotations

from typing import Any

from skills.kube.client import KubeJson
from skills.shared.errors import ErrorCode, ToolFailure

FIELD_MANAGER = "fsdp-eks"

# kind -> (API path prefix, plural, namespaced): what the component table applies.
KINDS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Service": ("/api/v1", "services", True),
    "Secret": ("/api/v1", "secrets", True),
    "Pod": ("/api/v1", "pods", True),
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
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims", True),
    "PersistentVolume": ("/api/v1", "persistentvolumes", False),
    "StorageClass": ("/apis/storage.k8s.io/v1", "storageclasses", False),
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


class Kube(KubeJson):
    """One cluster's API (raw JSON, skills.kube.client), counting the requests it
    makes, plus server-side apply."""

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Server-side apply (creates or updates; this tool owns the fields it sets)."""
        return self.json(
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
