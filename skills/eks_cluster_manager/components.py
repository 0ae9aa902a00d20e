"""The cluster components a training job needs, pinned: one row per component (version,
image, where it lives) and the manifests auto_fix applies for it (server-side apply).

The GPU node affinities come from the one instance table (skills.catalog.instances),
EC2 and SageMaker HyperPod (`ml.`) names both."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from skills.catalog.instances import INSTANCES, SAGEMAKER_PREFIX

INSTANCE_LABEL = "node.kubernetes.io/instance-type"
CRD_NAME = "pytorchjobs.kubeflow.org"
TRAINING_NAMESPACE = "kubeflow"
# The PyTorchJob CRD of Kubeflow Training Operator release-1.9, as released (gzip: 600 KB
# of YAML, most of it the embedded pod template schema).
CRD_FILE = Path(__file__).with_name("manifests") / "kubeflow.org_pytorchjobs.v1.9.yaml.gz"


@dataclass(frozen=True)
class Component:
    key: str
    title: str
    version: str
    image: str
    namespace: str | None  # None: the namespace the caller names (etcd)
    build: Callable[[Component, str], list[dict[str, Any]]]

    def manifests(self, namespace: str = "default") -> list[dict[str, Any]]:
        return self.build(self, self.namespace or namespace)


def _names(efa_only: bool = False) -> list[str]:
    names = [i.name for i in INSTANCES if i.efa or not efa_only]
    return sorted(names + [SAGEMAKER_PREFIX + n for n in names])


def _node_affinity(names: list[str]) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": INSTANCE_LABEL, "operator": "In", "values": names}]}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


def _plugin_daemonset(
    c: Component, ns: str, name: str, tolerations: list[dict], names: list[str], **pod: Any
) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/version": c.version}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
            "updateStrategy": {"type": "RollingUpdate"},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "priorityClassName": "system-node-critical",
                    "tolerations": tolerations,
                    "affinity": _node_affinity(names),
                    "containers": [
                        {
                            "name": name,
                            "image": c.image,
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                            },
                            "volumeMounts": [
                                {
                                    "name": "device-plugin",
                                    "mountPath": "/var/lib/kubelet/device-plugins",
                                }
                            ],
                            **pod.pop("container", {}),
                        }
                    ],
                    "volumes": [
                        {
                            "name": "device-plugin",
                            "hostPath": {"path": "/var/lib/kubelet/device-plugins"},
                        }
                    ],
                    **pod,
                },
            },
        },
    }


def _nvidia(c: Component, ns: str) -> list[dict[str, Any]]:
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    env = [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}]
    return [
        _plugin_daemonset(
            c, ns, "nvidia-device-plugin-daemonset", tolerations, _names(), container={"env": env}
        )
    ]


def _efa(c: Component, ns: str) -> list[dict[str, Any]]:
    tolerations = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "aws.amazon.com/efa", "operator": "Exists", "effect": "NoSchedule"},
    ]
    return [
        _plugin_daemonset(
            c,
            ns,
            "aws-efa-k8s-device-plugin-daemonset",
            tolerations,
            _names(efa_only=True),
            hostNetwork=True,
        )
    ]


@cache
def pytorchjob_crd() -> dict[str, Any]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 600 KB in a blink
    return yaml.load(gzip.decompress(CRD_FILE.read_bytes()), Loader=loader)  # noqa: S506


_OPERATOR_RULES = [
    {
        "apiGroups": ["kubeflow.org"],
        "resources": ["pytorchjobs", "pytorchjobs/status", "pytorchjobs/finalizers"],
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
    },
    {
        "apiGroups": [""],
        "resources": ["pods", "services", "configmaps", "events", "serviceaccounts"],
        "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
    },
    {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
    {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["roles", "rolebindings"],
        "verbs": ["create", "get", "list", "update", "watch"],
    },
    {
        "apiGroups": ["autoscaling"],
        "resources": ["horizontalpodautoscalers"],
        "verbs": ["create", "delete", "get", "list", "update", "watch"],
    },
    {
        "apiGroups": ["scheduling.volcano.sh", "scheduling.x-k8s.io"],
        "resources": ["podgroups"],
        "verbs": ["create", "delete", "get", "list", "update", "watch"],
    },
    # The operator's own webhook certificate: it fills the Secret and the caBundle.
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "update", "watch"]},
    {
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": ["validatingwebhookconfigurations"],
        "verbs": ["get", "list", "update", "watch"],
    },
]
WEBHOOK_SECRET = "training-operator-webhook-cert"  # the operator's --webhook-secret-name
WEBHOOK_CONFIG = "validator.training-operator.kubeflow.org"
CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"  # noqa: S108 - inside the operator's pod


def _training_operator(c: Component, ns: str) -> list[dict[str, Any]]:
    name = "training-operator"
    labels = {"control-plane": "kubeflow-training-operator"}
    meta = {"name": name, "namespace": ns, "labels": labels}
    container = {
        "name": name,
        "image": c.image,
        "command": ["/manager"],
        "args": ["--enable-scheme=pytorchjob"],
        "env": [
            {
                "name": "MY_POD_NAMESPACE",
                "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
            }
        ],
        "ports": [
            {"containerPort": 8080, "name": "metrics"},
            {"containerPort": 9443, "name": "webhook-server"},
        ],
        "volumeMounts": [{"name": "cert", "mountPath": CERT_DIR, "readOnly": True}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8081}},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8081}},
        "securityContext": {"allowPrivilegeEscalation": False},
    }
    return [
        pytorchjob_crd(),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": labels},
            "rules": _OPERATOR_RULES,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name, "labels": labels},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": name,
                        "containers": [container],
                        "volumes": [{"name": "cert", "secret": {"secretName": WEBHOOK_SECRET}}],
                    },
                },
            },
        },
        # Empty: the operator writes its self-signed webhook certificate into it.
        {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
         "metadata": {"name": WEBHOOK_SECRET, "namespace": ns}},
        {"apiVersion": "v1", "kind": "Service", "metadata": meta,
         "spec": {"selector": labels, "ports": [
             {"name": "monitoring-port", "port": 8080, "targetPort": 8080},
             {"name": "webhook-server", "port": 443, "targetPort": 9443}]}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
         "metadata": {"name": WEBHOOK_CONFIG},
         "webhooks": [{
             "name": "validator.pytorchjob.training-operator.kubeflow.org",
             "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
             "clientConfig": {"service": {"name": name, "namespace": ns,
                                          "path": "/validate-kubeflow-org-v1-pytorchjob"}},
             "rules": [{"apiGroups": ["kubeflow.org"], "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"], "resources": ["pytorchjobs"]}],
         }]},
    ]  # fmt: skip


def _etcd(c: Component, ns: str) -> list[dict[str, Any]]:
    labels = {"app.kubernetes.io/name": "etcd"}
    meta = {"name": "etcd", "namespace": ns, "labels": labels}
    container = {
        "name": "etcd",
        "image": c.image,
        "command": [
            "/usr/local/bin/etcd",
            "--data-dir=/var/lib/etcd",
            "--listen-client-urls=http://0.0.0.0:2379",
            f"--advertise-client-urls=http://etcd.{ns}:2379",
            "--listen-peer-urls=http://0.0.0.0:2380",
        ],
        "ports": [
            {"containerPort": 2379, "name": "client"},
            {"containerPort": 2380, "name": "peer"},
        ],
        "volumeMounts": [{"name": "data", "mountPath": "/var/lib/etcd"}],
    }
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta,
            "spec": {
                "selector": labels,
                "ports": [
                    {"name": "client", "port": 2379, "targetPort": 2379},
                    {"name": "peer", "port": 2380, "targetPort": 2380},
                ],
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [container],
                        "volumes": [{"name": "data", "emptyDir": {}}],
                    },
                },
            },
        },
    ]


COMPONENTS: tuple[Component, ...] = (
    Component(
        "nvidia_device_plugin",
        "NVIDIA device plugin",
        "v0.17.1",
        "nvcr.io/nvidia/k8s-device-plugin:v0.17.1",
        "kube-system",
        _nvidia,
    ),
    Component(
        "efa_device_plugin",
        "EFA device plugin",
        "v0.5.6",
        "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.6",
        "kube-system",
        _efa,
    ),
    Component(
        "training_operator",
        "Kubeflow Training Operator",
        "v1.9.2",
        "kubeflow/training-operator:v1.9.2",
        TRAINING_NAMESPACE,
        _training_operator,
    ),
    Component(
        "etcd", "etcd rendezvous service", "v3.5.17", "quay.io/coreos/etcd:v3.5.17", None, _etcd
    ),
)
BY_KEY = {c.key: c for c in COMPONENTS}
