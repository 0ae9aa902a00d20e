"""action=cleanup: what this suite created for a cluster, deleted in dependency order
(a plan first; confirm deletes), each resource only when its tags/labels say it is this
suite's (skills.shared.ownership):

1. PyTorchJobs (free the GPUs and the volume mounts), then the jobs' Secrets/ConfigMaps;
2. model servers (Deployments, Services, Secrets, ConfigMaps labelled fsdp-eks/model-server);
3. the storage's PersistentVolumeClaim, PersistentVolume and StorageClass;
4. node groups tagged created-by=fsdp-eks;
5. the FSx file system, then its security group (which FSx's network interfaces hold
   until the file system is gone);
   then the namespaces the suite created (labelled fsdp-eks/namespace), each only when
   nothing in it is left by this run or anyone else's (deleting it deletes its contents);
6. the bucket, only when asked: empty, or with its objects;
7. the cluster, only when asked, through `eksctl delete cluster` (its VPC cannot go
   while a file system's interfaces are in it).

Everything else is reported as left, with why. A second run finds nothing to delete."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from skills.cloud.clients import aws_error_code
from skills.eks_cluster_manager import nodegroups, storage
from skills.eks_cluster_manager.models import ResourceAction, ResourceChange
from skills.eks_cluster_manager.params import Bucket
from skills.kube import namespaces
from skills.kube.client import KubeJson
from skills.kube.objects import kind_path, object_path
from skills.shared import ownership
from skills.shared.errors import ErrorCode, ToolFailure

Part = Literal["jobs", "model_servers", "nodegroups", "fsx"]
PARTS: tuple[Part, ...] = ("jobs", "model_servers", "nodegroups", "fsx")
BucketPolicy = Literal["keep", "if_empty", "with_objects"]

# Cluster-wide lists (skills.kube.objects.kind_path), in deletion order: (part, kind, the
# label it must carry).
KUBE_STEPS: tuple[tuple[Part, str, str | None], ...] = (
    ("jobs", "PyTorchJob", None),
    ("model_servers", "Deployment", ownership.MODEL_SERVER_LABEL),
    ("model_servers", "Service", ownership.MODEL_SERVER_LABEL),
    ("model_servers", "Secret", ownership.MODEL_SERVER_LABEL),
    ("model_servers", "ConfigMap", ownership.MODEL_SERVER_LABEL),
    ("jobs", "Secret", None),  # a job's token Secret (no server label)
    ("jobs", "ConfigMap", None),
    ("fsx", "PersistentVolumeClaim", ownership.STORAGE_LABEL),
    ("fsx", "PersistentVolume", ownership.STORAGE_LABEL),
    ("fsx", "StorageClass", ownership.STORAGE_LABEL),
    # The pods' S3 identity (pod_identity.py), with its association and role below.
    ("fsx", "ServiceAccount", ownership.STORAGE_LABEL),
)
_OTHER_LABELS = (ownership.MODEL_SERVER_LABEL, ownership.STORAGE_LABEL)


class CleanupSpec(BaseModel):
    """action=cleanup's parameters, each declared here once: manage_eks_cluster flattens
    this model into its inputs (schema, CLI flags, validation) and gathers them back."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    only: Annotated[list[Part] | None, Field(description="cleanup: only these parts.")] = None
    bucket: Bucket = None  # None: the storage action's default name
    delete_bucket: Annotated[BucketPolicy, Field(description="cleanup: the bucket.")] = "keep"
    delete_cluster: Annotated[bool, Field(description="cleanup: the cluster (eksctl).")] = False

    @property
    def parts(self) -> tuple[Part, ...]:
        """The parts to sweep, in deletion order (all of them unless `only` names some)."""
        return needs_parts(self.only)


@dataclass
class Counted:
    """AWS clients of one session that count their API calls (the closing measure)."""

    session: Any
    calls: list[str] = field(default_factory=list)
    _clients: dict[str, Any] = field(default_factory=dict)

    def __call__(self, service: str) -> Any:
        if service not in self._clients:
            client = self.session.client(service)
            client.meta.events.register(
                "before-call", lambda model, **_: self.calls.append(f"{service}:{model.name}")
            )
            self._clients[service] = client
        return self._clients[service]


def _row(kind: str, name: str, action: ResourceAction, detail: str = "") -> ResourceChange:
    return ResourceChange(kind=kind, name=name, action=action, detail=detail)


def _delete(apply: bool, kind: str, name: str, do: Callable[[], Any]) -> ResourceChange:
    """Plan: 'delete'. Apply: run `do` (a str it returns says why it left the resource)."""
    if not apply:
        return _row(kind, name, "delete")
    import botocore.exceptions

    try:
        left = do()
    except botocore.exceptions.ClientError as exc:
        return _row(kind, name, "failed", f"{aws_error_code(exc)}: {exc}"[:300])
    if isinstance(left, str) and left:
        return _row(kind, name, "left", left)
    return _row(kind, name, "deleted")


# -- Kubernetes ---------------------------------------------------------------------


def kube_rows(kube: KubeJson, parts: tuple[Part, ...], apply: bool) -> list[ResourceChange]:
    from kubernetes.client.exceptions import ApiException

    rows = []
    selector = [("labelSelector", ownership.MANAGED_SELECTOR)]
    listed: dict[str, list[dict[str, Any]]] = {}  # one list per kind (Secrets serve two steps)
    going: dict[str, set[tuple[str, str]]] = {}  # namespace -> (kind, name) this run deletes
    for part, kind, label in KUBE_STEPS:
        if part not in parts:
            continue
        path = kind_path(kind)
        # The selector narrows a real API server's answer; the labels are read again here
        # (a server that ignores selectors must not widen what is deleted).
        if path not in listed:
            listed[path] = kube.items(path, selector)
        for obj in listed[path]:
            labels = (obj.get("metadata") or {}).get("labels") or {}
            if label is None and any(other in labels for other in _OTHER_LABELS):
                continue  # a server's or the storage's: their own step
            if not ownership.labelled_ours(obj, label):
                continue
            meta = obj["metadata"]
            name = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]
            going.setdefault(meta.get("namespace") or "", set()).add((kind, meta["name"]))
            if meta.get("deletionTimestamp"):
                rows.append(_row(kind, name, "left" if apply else "keep", "already deleting"))
                continue
            if not apply:
                rows.append(_row(kind, name, "delete"))
                continue
            try:
                kube.request(
                    "DELETE",
                    object_path({**obj, "kind": kind}),
                    query=[("propagationPolicy", "Background")],
                    missing_ok=(404,),
                )
                rows.append(_row(kind, name, "deleted"))
            except ApiException as exc:
                going[meta.get("namespace") or ""].discard((kind, meta["name"]))
                rows.append(_row(kind, name, "failed", f"HTTP {exc.status} {exc.reason or ''}"))
    if not set(parts) & {part for part, _, _ in KUBE_STEPS}:
        return rows  # a run for the node groups alone leaves namespaces be
    return rows + namespace_rows(kube, going, apply)


def namespace_rows(
    kube: KubeJson, going: dict[str, set[tuple[str, str]]], apply: bool
) -> list[ResourceChange]:
    """The namespaces the suite created, each deleted only when what it holds is going
    with this run (`going`) or Kubernetes' own; anything else keeps it, named."""
    from kubernetes.client.exceptions import ApiException

    rows = []
    listed = kube.items(kind_path("Namespace"), [("labelSelector", ownership.MANAGED_SELECTOR)])
    for obj in listed:
        name = (obj.get("metadata") or {}).get("name") or ""
        if not namespaces.created_by_suite(obj) or name in namespaces.ALWAYS_THERE:
            continue
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            rows.append(_row("Namespace", name, "left" if apply else "keep", "already deleting"))
            continue
        held = namespaces.foreign_contents(kube, name, going.get(name, set()))
        if held:
            shown = ", ".join(f"{c.kind} {c.name}" for c in held[:5])
            more = f" and {len(held) - 5} more" if len(held) > 5 else ""
            rows.append(
                _row(
                    "Namespace",
                    name,
                    "keep",
                    f"holds {shown}{more}, which this run does not delete",
                )
            )
            continue
        if not apply:
            rows.append(_row("Namespace", name, "delete"))
            continue
        try:
            kube.request("DELETE", kind_path("Namespace", name=name), missing_ok=(404,))
            rows.append(_row("Namespace", name, "deleted"))
        except ApiException as exc:
            rows.append(_row("Namespace", name, "failed", f"HTTP {exc.status} {exc.reason or ''}"))
    return rows


# -- AWS ------------------------------------------------------------------------------


def nodegroup_rows(eks: Any, cluster: str, apply: bool) -> list[ResourceChange]:
    rows = []
    for name in nodegroups.names(eks, cluster):
        group = eks.describe_nodegroup(clusterName=cluster, nodegroupName=name)["nodegroup"]
        if not ownership.made_by_suite(group.get("tags")):
            rows.append(_row("node group", name, "keep", "not created by fsdp-eks"))
        elif group.get("status") == "DELETING":
            rows.append(_row("node group", name, "left" if apply else "keep", "already deleting"))
        else:
            rows.append(
                _delete(
                    apply,
                    "node group",
                    name,
                    lambda n=name: eks.delete_nodegroup(clusterName=cluster, nodegroupName=n),
                )
            )
    return rows


def fsx_rows(fsx: Any, ec2: Any, cluster: str, apply: bool) -> list[ResourceChange]:
    rows = []
    for page in fsx.get_paginator("describe_file_systems").paginate():
        for fs in page.get("FileSystems", []):
            if not ownership.ours(fs.get("Tags"), cluster):
                continue
            fs_id = fs["FileSystemId"]
            if fs.get("Lifecycle") == "DELETING":
                rows.append(
                    _row("FSx file system", fs_id, "left" if apply else "keep", "already deleting")
                )
                continue
            rows.append(
                _delete(
                    apply,
                    "FSx file system",
                    fs_id,
                    lambda i=fs_id: fsx.delete_file_system(FileSystemId=i),
                )
            )
    groups = ec2.describe_security_groups(
        Filters=[
            {"Name": f"tag:{ownership.CREATED_BY_TAG[0]}", "Values": [ownership.CREATED_BY_TAG[1]]},
            {"Name": f"tag:{ownership.CLUSTER_TAG}", "Values": [cluster]},
        ]
    )["SecurityGroups"]
    for group in groups:
        if not ownership.ours(group.get("Tags"), cluster):  # filters a stand-in may ignore
            continue
        rows.append(
            _delete(
                apply,
                "SecurityGroup",
                group["GroupId"],
                lambda g=group["GroupId"]: _delete_group(ec2, g),
            )
        )
    return rows


def file_system_remains(fsx: Any, cluster: str) -> bool:
    """Any file system of this suite's for the cluster, deleting ones too."""
    return any(
        ownership.ours(fs.get("Tags"), cluster)
        for page in fsx.get_paginator("describe_file_systems").paginate()
        for fs in page.get("FileSystems", [])
    )


def _delete_group(ec2: Any, group_id: str) -> str | None:
    import botocore.exceptions

    try:
        ec2.delete_security_group(GroupId=group_id)
    except botocore.exceptions.ClientError as exc:
        if aws_error_code(exc) != "DependencyViolation":
            raise
        return (
            "still in use (the file system's network interfaces hold it until FSx has "
            "deleted it, minutes): run action=cleanup again"
        )
    return None


def bucket_rows(
    s3: Any, name: str, cluster: str, policy: BucketPolicy, apply: bool
) -> list[ResourceChange]:
    state = storage.bucket_state(s3, name, cluster)
    if not state.exists:
        return []
    if state.not_ours:  # another cluster's bucket (the suite's or not) is not this one's
        return [_row("S3 bucket", name, "keep", state.not_ours)]
    if policy == "keep":
        return [
            _row(
                "S3 bucket", name, "keep", "kept: delete_bucket=if_empty or with_objects deletes it"
            )
        ]
    has_objects = bool(s3.list_objects_v2(Bucket=name, MaxKeys=1).get("KeyCount"))
    if has_objects and policy == "if_empty":
        return [
            _row(
                "S3 bucket",
                name,
                "left" if apply else "keep",
                "has objects: delete_bucket=with_objects deletes them too",
            )
        ]
    return [_delete(apply, "S3 bucket", name, lambda: _delete_bucket(s3, name))]


def _delete_bucket(s3: Any, name: str) -> None:
    """Every object version and delete marker, 1000 a request, then the bucket."""
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=name):
        keys = [
            {"Key": v["Key"], "VersionId": v["VersionId"]}
            for v in page.get("Versions", []) + page.get("DeleteMarkers", [])
        ]
        for i in range(0, len(keys), 1000):
            s3.delete_objects(Bucket=name, Delete={"Objects": keys[i : i + 1000], "Quiet": True})
    s3.delete_bucket(Bucket=name)


# The command as a person would paste it (the argv cleanup runs is split from it).
DELETE_CLUSTER = "`eksctl delete cluster --name {cluster} --region {region} --wait`"


def delete_cluster_command(cluster: str, region: str) -> list[str]:
    return shlex.split(DELETE_CLUSTER.strip("`").format(cluster=cluster, region=region))


def cluster_row(
    tags: dict[str, str] | None,
    cluster: str,
    region: str,
    fs_left: bool,
    apply: bool,
) -> ResourceChange:
    command = DELETE_CLUSTER.format(cluster=cluster, region=region)
    if not ownership.made_by_suite(tags):
        return _row("EKS cluster", cluster, "keep", "not created by fsdp-eks (no created-by tag)")
    if fs_left:
        return _row(
            "EKS cluster",
            cluster,
            "left" if apply else "delete",
            "after the file system is gone (its interfaces hold the VPC): run action=cleanup again",
        )
    if not apply:
        return _row("EKS cluster", cluster, "delete", command)
    binary = shutil.which("eksctl")
    if binary is None:
        return _row("EKS cluster", cluster, "left", f"eksctl is not on PATH; run: {command}")
    done = subprocess.run(
        [binary, *delete_cluster_command(cluster, region)[1:]],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        tail = " ".join((done.stdout + done.stderr).splitlines()[-3:])
        return _row("EKS cluster", cluster, "failed", f"eksctl exited {done.returncode}: {tail}")
    return _row("EKS cluster", cluster, "deleted", command)


def needs_parts(parts: Sequence[str] | None) -> tuple[Part, ...]:
    if not parts:
        return PARTS
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"Unknown cleanup part(s): {', '.join(unknown)}.",
            f"Name some of: {', '.join(PARTS)}.",
            {"problems": [{"field": "only", "problem": f"one of {', '.join(PARTS)}"}]},
        )
    return tuple(p for p in PARTS if p in parts)
