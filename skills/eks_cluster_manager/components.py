"""The cluster components a training job needs, pinned: one row per component (version,
image, where it lives). What auto_fix applies for each is the upstream project's own
manifest at that version with the listed changes (skills.eks_cluster_manager.upstream)."""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from skills.eks_cluster_manager import upstream

CRD_NAME = "pytorchjobs.kubeflow.org"
TRAINING_NAMESPACE = "kubeflow"
TRAINER_NAMESPACE = "kubeflow-system"  # Trainer v2's overlay installs itself and JobSet here
# The PyTorchJob CRD of Kubeflow Training Operator v1.9.4, as released (gzip: 600 KB of
# YAML, most of it the embedded pod template schema); the same CRD the vendored
# standalone overlay carries (tests/unit/test_eks_upstream.py).
CRD_FILE = Path(__file__).with_name("manifests") / "kubeflow.org_pytorchjobs.v1.9.yaml.gz"


@dataclass(frozen=True)
class Component:
    key: str
    title: str
    version: str
    image: str  # as the vendored upstream manifest pins it (or a listed change does)
    namespace: str | None  # None: the namespace the caller names (etcd), or cluster-scoped
    # Training runs without it (monitoring): its absence is a warning, which auto_fix
    # still fixes by installing it.
    optional: bool = False

    def manifests(self, namespace: str = "default") -> list[dict[str, Any]]:
        return upstream.render(self.key, self.namespace or namespace)


@cache
def pytorchjob_crd() -> dict[str, Any]:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 600 KB in a blink
    return yaml.load(gzip.decompress(CRD_FILE.read_bytes()), Loader=loader)  # noqa: S506


COMPONENTS: tuple[Component, ...] = (
    Component(
        "nvidia_device_plugin",
        "NVIDIA device plugin",
        "v0.20.0",
        "nvcr.io/nvidia/k8s-device-plugin:v0.20.0",
        "kube-system",
    ),
    Component(
        "efa_device_plugin",
        "EFA device plugin",
        "v0.5.20",
        "602401143452.dkr.ecr.us-west-2.amazonaws.com/eks/aws-efa-k8s-device-plugin:v0.5.20",
        "kube-system",
    ),
    Component(
        "training_operator",
        "Kubeflow Training Operator",
        "v1.9.4",
        # What upstream v1.9.4's standalone overlay pins (its CI pushes v1-<sha>).
        "ghcr.io/kubeflow/training-v1/training-operator:v1-93c5489",
        TRAINING_NAMESPACE,
    ),
    Component("etcd", "etcd rendezvous service", "v3.5.33", upstream.ETCD_IMAGE, None),
    # Kubeflow Trainer v2 (TrainJob): installed where neither engine is. Applied in this
    # order: Trainer's namespace and CRDs first, then JobSet into that namespace, then the
    # runtimes (their CRD must be there; the webhook skips them by their label).
    Component(
        "kubeflow_trainer",
        "Kubeflow Trainer",
        "v2.3.0",
        "ghcr.io/kubeflow/trainer/trainer-controller-manager:v2.3.0",
        TRAINER_NAMESPACE,
    ),
    Component(
        "jobset", "JobSet", "v0.12.0", "registry.k8s.io/jobset/jobset:v0.12.0", TRAINER_NAMESPACE
    ),
    Component(
        "kubeflow_trainer_runtimes",
        "Kubeflow Trainer runtimes",
        "v2.3.0",
        "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime",  # torch-distributed's, the one we use
        None,  # cluster-scoped
    ),
    # GPU health counters (XIDs, ECC, row remaps, throttling) the pod doctor reads through
    # the API server (skills/kube/dcgm.py); upstream's static manifest (NVIDIA/dcgm-exporter).
    Component(
        "dcgm_exporter",
        "NVIDIA DCGM exporter",
        "4.5.3-4.8.2",
        "nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless",
        "kube-system",
        optional=True,
    ),
)
BY_KEY = {c.key: c for c in COMPONENTS}
