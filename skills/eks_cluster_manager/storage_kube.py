"""action=storage's Kubernetes side: the StorageClass, PersistentVolume and
PersistentVolumeClaim that mount the FSx file system by static provisioning through the
FSx CSI driver (fsx.csi.aws.com), each applied only when missing or different and
refused when someone else's; and the CSI driver's install hint."""

from __future__ import annotations

from typing import Any

from skills.eks_cluster_manager.models import ResourceAction, ResourceChange
from skills.eks_cluster_manager.storage import (
    CSI_DRIVER,
    CSI_WORKLOADS,
    DONE,
    PERSISTENT_VOLUME,
    STORAGE_CLASS,
    ClusterStorage,
)
from skills.kube import namespaces
from skills.kube.client import KubeJson
from skills.kube.objects import kind_path, object_path
from skills.shared import ownership


def kube_objects(spec: ClusterStorage, fs: dict[str, Any]) -> list[dict[str, Any]]:
    """StorageClass, PV, PVC for the file system (static provisioning: the PV names the
    file system; the claim binds that PV by name)."""
    labels = ownership.managed_labels(**{ownership.STORAGE_LABEL: "fsx"})
    size = f"{fs.get('StorageCapacity', spec.fsx_size_gib)}Gi"
    lustre = fs.get("LustreConfiguration") or {}
    return [
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": STORAGE_CLASS, "labels": labels},
            "provisioner": CSI_DRIVER,
            "reclaimPolicy": "Retain",
            "volumeBindingMode": "Immediate",
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": PERSISTENT_VOLUME, "labels": labels},
            "spec": {
                "capacity": {"storage": size},
                "volumeMode": "Filesystem",
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",  # deleting the claim keeps data
                "storageClassName": STORAGE_CLASS,
                "mountOptions": ["flock"],
                "claimRef": {"namespace": spec.namespace, "name": spec.claim},
                "csi": {
                    "driver": CSI_DRIVER,
                    "volumeHandle": fs["FileSystemId"],
                    "volumeAttributes": {
                        "dnsname": fs["DNSName"],
                        "mountname": lustre["MountName"],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": spec.claim, "namespace": spec.namespace, "labels": labels},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": STORAGE_CLASS,
                "volumeName": PERSISTENT_VOLUME,
                "resources": {"requests": {"storage": size}},
            },
        },
    ]


def _kube_names(spec: ClusterStorage) -> list[tuple[str, str]]:
    return [
        ("StorageClass", STORAGE_CLASS),
        ("PersistentVolume", PERSISTENT_VOLUME),
        ("PersistentVolumeClaim", f"{spec.namespace}/{spec.claim}"),
    ]


def _differs(actual: Any, wanted: Any, path: str = "") -> str | None:
    """The first field of `wanted` that `actual` does not have as wanted (the API server
    adds defaults and status; those are not differences)."""
    if isinstance(wanted, dict):
        if not isinstance(actual, dict):
            return path or "."
        for key, value in wanted.items():
            found = _differs(actual.get(key), value, f"{path}.{key}" if path else key)
            if found:
                return found
        return None
    return None if actual == wanted else (path or ".")


def _kube_refs(spec: ClusterStorage) -> list[dict[str, Any]]:
    """The StorageClass, PV and claim as references (kind, name, namespace): what
    kube_objects renders, known before the file system is."""
    return [
        {"kind": "StorageClass", "metadata": {"name": STORAGE_CLASS}},
        {"kind": "PersistentVolume", "metadata": {"name": PERSISTENT_VOLUME}},
        {
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": spec.claim, "namespace": spec.namespace},
        },
    ]


_NOT_OURS_HINT = (
    "storage never takes over an object it did not make (a later cleanup would delete it)."
)


def current_objects(kube: KubeJson, spec: ClusterStorage) -> list[dict[str, Any] | None]:
    """The StorageClass, PV and claim as the cluster has them (None: missing), each one
    this suite's: one of the same name that is not is refused as `not_ours` before
    anything (AWS included) is written, in the plan as in the apply."""
    found = []
    for ref, (kind, name) in zip(_kube_refs(spec), _kube_names(spec), strict=True):
        current = kube.get_or_none(object_path(ref))
        instead = (
            "Name another claim (checkpoint_pvc=...)"
            if kind == "PersistentVolumeClaim"
            else f"The suite's {kind} is always named {name}: move that one out of the way"
        )
        ownership.require_kube_ours(
            current,
            kind,
            name,
            f"{instead}; {_NOT_OURS_HINT}",
            label=ownership.STORAGE_LABEL,
            namespace=ref["metadata"].get("namespace"),
        )
        found.append(current)
    return found


def ensure_objects(
    kube: KubeJson,
    spec: ClusterStorage,
    fs: dict[str, Any] | None,
    apply: bool,
    current: list[dict[str, Any] | None],
) -> list[ResourceChange]:
    """`current`: current_objects' answer (read, and checked as ours, before any write)."""
    from kubernetes.client.exceptions import ApiException

    mount = ((fs or {}).get("LustreConfiguration") or {}).get("MountName")
    if fs is None or not mount or not fs.get("DNSName"):
        pending = (
            "names the new file system (id, DNS name, mount name)"
            if fs is None
            else "waiting for the file system's mount name (FSx reports it once it is "
            "created): run action=storage again"
        )
        later: ResourceAction = "create" if fs is None or not apply else "left"
        return [
            ResourceChange(
                kind=kind,
                name=name,
                action=later,
                detail=pending if kind == "PersistentVolume" or fs is not None else "",
            )
            for kind, name in _kube_names(spec)
        ]
    rows = namespace_row(kube, spec.namespace, apply)
    for obj, (kind, name), have in zip(
        kube_objects(spec, fs), _kube_names(spec), current, strict=True
    ):
        differs = None if have is None else _differs(have, obj)
        action: ResourceAction = (
            "create" if have is None else ("update" if differs else "unchanged")
        )
        detail = f"{differs} differs" if differs else ""
        if kind == "PersistentVolume":
            detail = (detail + f"; {CSI_DRIVER} {fs['FileSystemId']}").lstrip("; ")
        if apply and action != "unchanged":
            try:  # checked again at the write: one made or replaced since is refused
                kube.apply_owned(obj, _NOT_OURS_HINT, label=ownership.STORAGE_LABEL, current=have)
                action = DONE[action]
            except ApiException as exc:  # a PV's source is immutable: say so, go on
                action = "failed"
                detail = f"HTTP {exc.status} {exc.reason or ''}".strip()
        rows.append(ResourceChange(kind=kind, name=name, action=action, detail=detail))
    return rows


def namespace_row(kube: KubeJson, namespace: str, apply: bool) -> list[ResourceChange]:
    """The claim's namespace, created (labelled as the suite's) when the cluster lacks it."""
    if not namespaces.missing(kube, namespace):
        return []
    if apply:
        namespaces.ensure(kube, namespace)
    return [
        ResourceChange(kind="Namespace", name=namespace, action="created" if apply else "create")
    ]


def csi_driver(kube: KubeJson) -> str | None:
    """Where the FSx CSI driver runs ('kube-system/fsx-csi-node'), or None."""
    for kind in ("DaemonSet", "Deployment"):
        for obj in kube.items(kind_path(kind)):
            meta = obj.get("metadata") or {}
            if meta.get("name") in CSI_WORKLOADS:
                return f"{meta.get('namespace')}/{meta['name']}"
    return None


# The EKS add-on with its IAM role for the controller's service account: the same policy
# action=create_config's eksctl config attaches through its add-on entry (eksctl.ADDONS).
CSI_POLICY = "arn:aws:iam::aws:policy/AmazonFSxFullAccess"
CSI_INSTALL = (
    "`eksctl create iamserviceaccount --cluster {cluster} --region {region} --namespace "
    "kube-system --name fsx-csi-controller-sa --attach-policy-arn "
    "{policy} --role-name {role} --role-only --approve`, "
    "then `aws eks create-addon --cluster-name {cluster} --region {region} --addon-name "
    "aws-fsx-csi-driver --service-account-role-arn arn:aws:iam::{account}:role/{role}`"
)


def csi_install_hint(cluster: str, region: str, account: str) -> str:
    role = f"fsdp-eks-fsx-csi-{cluster}"[:64]
    return CSI_INSTALL.format(
        cluster=cluster, region=region, account=account, role=role, policy=CSI_POLICY
    )
