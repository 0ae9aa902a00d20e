"""Where each kind of object lives in the Kubernetes API, and server-side apply: the one
place a tool spells an object's REST path (the cluster checks, storage, cleanup, the job
and model-server targets all write through it)."""

from __future__ import annotations

from typing import Any

FIELD_MANAGER = "fsdp-eks"

# kind -> (API path prefix, plural, namespaced).
KINDS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Service": ("/api/v1", "services", True),
    "Secret": ("/api/v1", "secrets", True),
    "Pod": ("/api/v1", "pods", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Event": ("/api/v1", "events", True),
    "Node": ("/api/v1", "nodes", False),
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
    # Kubeflow Trainer v2 (v2.3.0) and the JobSet its TrainJobs run as (v0.12.0).
    "TrainJob": ("/apis/trainer.kubeflow.org/v1alpha1", "trainjobs", True),
    "ClusterTrainingRuntime": (
        "/apis/trainer.kubeflow.org/v1alpha1",
        "clustertrainingruntimes",
        False,
    ),
    "JobSet": ("/apis/jobset.x-k8s.io/v1alpha2", "jobsets", True),
    "PersistentVolumeClaim": ("/api/v1", "persistentvolumeclaims", True),
    "PersistentVolume": ("/api/v1", "persistentvolumes", False),
    "StorageClass": ("/apis/storage.k8s.io/v1", "storageclasses", False),
    "ValidatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        False,
    ),
    # Kubeflow Trainer v2's install (with JobSet's) and the checks of it.
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "MutatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "mutatingwebhookconfigurations",
        False,
    ),
    "EndpointSlice": ("/apis/discovery.k8s.io/v1", "endpointslices", True),
}


def api_version(kind: str) -> str:
    """The kind's apiVersion as a manifest spells it ("v1", "kubeflow.org/v1")."""
    prefix = KINDS[kind][0]
    return prefix.removeprefix("/api/").removeprefix("/apis/")


def kind_path(kind: str, namespace: str | None = None, name: str | None = None) -> str:
    """The REST path of a kind's objects (in `namespace`, for a namespaced kind; every
    namespace when None), or of the one named `name`."""
    prefix, plural, namespaced = KINDS[kind]
    where = f"/namespaces/{namespace}" if namespaced and namespace else ""
    return f"{prefix}{where}/{plural}" + (f"/{name}" if name else "")


def object_path(obj: dict[str, Any]) -> str:
    """The path of a manifest's object (a namespaced one must name its namespace)."""
    meta = obj["metadata"]
    namespaced = KINDS[obj["kind"]][2]
    return kind_path(obj["kind"], meta["namespace"] if namespaced else None, meta["name"])
