"""The pinned components as their upstream projects ship them, and THE one table of what
auto_fix changes in them.

Each component's manifest is vendored under manifests/upstream/ (source repository, tag,
commit and path in manifests/upstream/SOURCES.yaml). `render` loads it and applies the
rows of CHANGES for that component, nothing else: tests/unit/test_eks_upstream.py fails
on any difference between what auto_fix applies and the vendored file that no row lists.

Deliberate choices that are NOT changes (kept as upstream ships them):
- NVIDIA plugin: no node affinity (it runs on every node, as upstream's static manifest
  does); an affinity on the catalogue's instance types would leave a GPU type the
  catalogue lacks without a plugin. FAIL_ON_INIT_ERROR=false (a listed change) makes it
  idle on a node without a GPU.
- Training Operator: the whole standalone overlay (six CRDs, every job kind's webhook),
  so the webhook configuration and the operator's schemes agree as upstream tests them.
- etcd: upstream's bare Pod (not a Deployment). Rendezvous state is per job and lost on
  any restart either way; auto_fix recreates a lost Pod.
- Kubeflow Trainer v2: the manager overlay whole (its namespace kubeflow-system, the
  three CRDs, RBAC, webhooks) and all eight built-in runtimes of the runtimes overlay, as
  upstream's install documents; JobSet as that overlay ships it (in kubeflow-system, image
  from registry.k8s.io), a component of its own so an existing JobSet is not doubled.
"""

from __future__ import annotations

import copy
import gzip
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from skills.catalog.instances import INSTANCES, SAGEMAKER_PREFIX
from skills.kube.efa import GPU_TOLERATIONS

UPSTREAM_DIR = Path(__file__).with_name("manifests") / "upstream"
FILES = {
    "nvidia_device_plugin": "nvidia-device-plugin.v0.20.0.yml",
    "efa_device_plugin": "aws-efa-k8s-device-plugin.chart-v0.5.30.yaml",
    "training_operator": "training-operator.v1.9.4.standalone.yaml.gz",
    "etcd": "etcd.pytorch-elastic.yaml",
    "kubeflow_trainer": "kubeflow-trainer.v2.3.0.manager.yaml.gz",
    "kubeflow_trainer_runtimes": "kubeflow-trainer.v2.3.0.runtimes.yaml",
    "dcgm_exporter": "dcgm-exporter.4.5.3-4.8.2.yaml",
}

_NAME_LABEL = "app.kubernetes.io/name"


def _from_jobset(obj: dict[str, Any]) -> bool:
    """Whether an object of Trainer's manager overlay came from JobSet's release manifests
    (every one of those carries JobSet's name label; none of Trainer's own does)."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(_NAME_LABEL) == "jobset"


# Components that are a part of one vendored file: key -> (file key, whether an object is
# theirs). Trainer's install carries JobSet; where a JobSet controller runs already (as
# the overlay's comment says), auto_fix applies Trainer's part alone.
PARTS: dict[str, tuple[str, Callable[[dict[str, Any]], bool]]] = {
    "kubeflow_trainer": ("kubeflow_trainer", lambda o: not _from_jobset(o)),
    "jobset": ("kubeflow_trainer", _from_jobset),
}
ETCD_IMAGE = "quay.io/coreos/etcd:v3.5.33"  # newest 3.5 tag (etcd-io/etcd, 2026-07-23)
_AFFINITY_VALUES = (
    "spec",
    "template",
    "spec",
    "affinity",
    "nodeAffinity",
    "requiredDuringSchedulingIgnoredDuringExecution",
    "nodeSelectorTerms",
    0,
    "matchExpressions",
    0,
    "values",
)
_TOLERATIONS = ("spec", "template", "spec", "tolerations")
_ENV = ("spec", "template", "spec", "containers", 0, "env")
_IDLE_WITHOUT_GPU = [{"name": "FAIL_ON_INIT_ERROR", "value": "false"}]
# upstream value at the path, the namespace -> the value auto_fix applies
Edit = Callable[[Any, str], Any]


@dataclass(frozen=True)
class Change:
    component: str
    kind: str
    name: str  # the object's name upstream
    path: tuple[str | int, ...]
    edit: Edit
    reason: str


def _plus(extra: list[dict[str, str]]) -> Edit:
    return lambda old, _ns: [*(old or []), *(t for t in extra if t not in (old or []))]


def _efa_types(old: list[str], _ns: str) -> list[str]:
    ours = [i.name for i in INSTANCES if i.efa]
    names = [*old, *(n for n in ours if n not in old)]
    return [*names, *(SAGEMAKER_PREFIX + n for n in ours)]


def _advertise(old: str, ns: str) -> str:
    if old != "http://0.0.0.0:2379":  # the value after --advertise-client-urls
        raise ValueError(f"etcd's upstream command changed: {old!r}")
    return f"http://etcd.{ns}:2379"


def _gpu_types(_old: Any, _ns: str) -> dict[str, Any]:
    """Required node affinity on the catalogue's GPU instance types and their ml. names."""
    ours = [i.name for i in INSTANCES if i.gpus]
    values = [*ours, *(SAGEMAKER_PREFIX + n for n in ours)]
    term = {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": values}
    terms = [{"matchExpressions": [term]}]
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }


_EFA_TAINT = [t for t in GPU_TOLERATIONS if t["key"] == "aws.amazon.com/efa"]
_NVIDIA, _EFA, _ETCD = "nvidia_device_plugin", "efa_device_plugin", "etcd"
_NVIDIA_DS, _EFA_DS = "nvidia-device-plugin-daemonset", "aws-efa-k8s-device-plugin"
_DCGM, _DCGM_DS = "dcgm_exporter", "dcgm-exporter"
_DCGM_NS = (
    "`kubectl create -f` puts it in the context's namespace (upstream names none); "
    "kube-system, beside the device plugins, is one every cluster has."
)

CHANGES: tuple[Change, ...] = (
    Change(
        _NVIDIA,
        "DaemonSet",
        _NVIDIA_DS,
        _TOLERATIONS,
        _plus(_EFA_TAINT),
        "EFA node groups carry the aws.amazon.com/efa taint; upstream tolerates only "
        "nvidia.com/gpu, so p4d/p5 nodes of an EFA node group would get no GPU plugin.",
    ),
    Change(
        _NVIDIA,
        "DaemonSet",
        _NVIDIA_DS,
        _ENV,
        _plus(_IDLE_WITHOUT_GPU),
        "Upstream dropped FAIL_ON_INIT_ERROR=false from its static manifest in v0.18.0 "
        "(b3d005434); the default (true) crash-loops the pod on every CPU node, which "
        "the DaemonSet check reads as not ready. A GPU node whose NVML fails is still "
        "caught: gpu_allocatable sees it advertise fewer GPUs.",
    ),
    Change(
        _EFA,
        "DaemonSet",
        _EFA_DS,
        ("metadata", "namespace"),
        lambda _o, _n: "kube-system",
        "`helm install -n kube-system` sets it; `helm template` leaves it out.",
    ),
    Change(
        _EFA,
        "DaemonSet",
        _EFA_DS,
        _TOLERATIONS,
        _plus(list(GPU_TOLERATIONS)),
        "GPU node groups carry nvidia.com/gpu and EFA ones aws.amazon.com/efa (the "
        "chart's values.yaml suggests the latter; its default is none).",
    ),
    Change(
        _EFA,
        "DaemonSet",
        _EFA_DS,
        _AFFINITY_VALUES,
        _efa_types,
        "Also the catalogue's EFA types the chart lacks, and every EFA type's ml. name "
        "(SageMaker HyperPod labels nodes ml.<type>); upstream's list is kept whole.",
    ),
    Change(
        _ETCD,
        "Service",
        "etcd-service",
        ("metadata", "name"),
        lambda _o, _n: "etcd",
        "The endpoint the jobs and the etcd_service check use: etcd.<namespace>:2379.",
    ),
    Change(
        _ETCD,
        "Service",
        "etcd-service",
        ("metadata", "namespace"),
        lambda _o, ns: ns,
        "etcd runs in the namespace of the jobs (upstream: elastic-job).",
    ),
    Change(
        _ETCD,
        "Pod",
        "etcd",
        ("metadata", "namespace"),
        lambda _o, ns: ns,
        "etcd runs in the namespace of the jobs (upstream: elastic-job).",
    ),
    Change(
        _ETCD,
        "Pod",
        "etcd",
        ("spec", "containers", 0, "image"),
        lambda _o, _n: ETCD_IMAGE,
        "Pinned instead of :latest; 3.5 still serves the v2 API when enabled (upstream's "
        "command enables it), "
        "and torchrun's etcd backend speaks v2; 3.6 removed it.",
    ),
    Change(
        _ETCD,
        "Pod",
        "etcd",
        ("spec", "containers", 0, "command", 7),
        _advertise,
        "Advertise the Service's name: 0.0.0.0 is not an address a client can reach.",
    ),
    Change(
        _DCGM,
        "DaemonSet",
        _DCGM_DS,
        ("metadata", "namespace"),
        lambda _o, _n: "kube-system",
        _DCGM_NS,
    ),
    Change(
        _DCGM,
        "Service",
        _DCGM_DS,
        ("metadata", "namespace"),
        lambda _o, _n: "kube-system",
        _DCGM_NS,
    ),
    Change(
        _DCGM,
        "DaemonSet",
        _DCGM_DS,
        _TOLERATIONS,
        _plus(list(GPU_TOLERATIONS)),
        "Our GPU node groups carry nvidia.com/gpu and EFA ones aws.amazon.com/efa; "
        "upstream tolerates none, so it would run on no GPU node of ours.",
    ),
    Change(
        _DCGM,
        "DaemonSet",
        _DCGM_DS,
        ("spec", "template", "spec", "affinity"),
        _gpu_types,
        "DCGM finds no GPU on a CPU node and the exporter exits there (a pod never ready); "
        "upstream runs it on every node: the catalogue's GPU types (and ml. names) only.",
    ),
)


@cache
def _load(key: str) -> tuple[dict[str, Any], ...]:
    import yaml

    path = UPSTREAM_DIR / FILES[key]
    data = path.read_bytes()
    text = gzip.decompress(data) if path.suffix == ".gz" else data
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 3.5 MB in a second
    return tuple(d for d in yaml.load_all(text, Loader=loader) if d)  # noqa: S506


def file_objects(file_key: str) -> list[dict[str, Any]]:
    """A vendored file's objects, unchanged and whole (a fresh copy)."""
    return copy.deepcopy(list(_load(file_key)))


def upstream_objects(key: str) -> list[dict[str, Any]]:
    """The component's vendored upstream objects, unchanged (a fresh copy)."""
    file_key, theirs = PARTS.get(key, (key, None))
    objects = _load(file_key)
    return copy.deepcopy([o for o in objects if theirs is None or theirs(o)])


def render(key: str, namespace: str) -> list[dict[str, Any]]:
    """The upstream objects with this component's rows of CHANGES applied."""
    objects = upstream_objects(key)
    by_name = {(o["kind"], o["metadata"]["name"]): o for o in objects}  # before renames
    for change in CHANGES:
        if change.component != key:
            continue
        obj = by_name[change.kind, change.name]
        *parents, last = change.path
        node: Any = obj  # a JSON tree: a dict or a list at each step of the path
        for step in parents:
            node = node[step]
        old = node[last] if isinstance(last, int) else node.get(last)  # int: a list index
        node[last] = change.edit(old, namespace)
    return objects
