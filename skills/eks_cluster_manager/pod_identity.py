"""S3 for pods (part of action=storage): an IAM role that reaches the storage's bucket and
nothing else, the eks-pod-identity-agent add-on, the EKS Pod Identity association of the
role with the ServiceAccount skills.kube.identity names, and that ServiceAccount. Each is
a plan row, made (confirm) only when missing or different, and tagged/labelled as this
suite's so cleanup removes exactly these.

One role per namespace (so per namespace and its bucket), not one per cluster whose
trust and policy would have to be the union of every namespace's: storage for a second
namespace then never touches the first one's role, and a namespace's pods reach their own
bucket only. That is what AWS recommends for Pod Identity (pod-identities.html, "Least
privilege": permissions scoped to one service account; IAM best practices: grant least
privilege), and it keeps each role's write a whole-document replace of what that one
namespace needs, with nothing of another's to merge or drop. A role made by an older
release (one per cluster, `legacy_role_name`) is left to the associations that still
name it and removed by cleanup.

Sources: the trust policy is the one EKS Pod Identity requires (docs.aws.amazon.com/eks/
latest/userguide/pod-id-role.html: principal pods.eks.amazonaws.com, sts:AssumeRole and
sts:TagSession), narrowed with the session tags Pod Identity sets (pod-id-abac.html:
eks-cluster-name, kubernetes-namespace, kubernetes-service-account) so no other
association in the account can assume it. The agent add-on is what hands pods the
credentials (pod-id-agent-setup.html); create_config's eksctl config installs it on new
clusters."""

from __future__ import annotations

import hashlib
import json
from typing import Any
from urllib.parse import unquote

from skills.cloud.clients import aws_error_code
from skills.eks_cluster_manager import ownership
from skills.eks_cluster_manager.models import ResourceAction, ResourceChange
from skills.kube.client import KubeJson
from skills.kube.identity import BUCKET_ANNOTATION, ROLE_ANNOTATION, S3_SERVICE_ACCOUNT
from skills.kube.objects import object_path
from skills.shared.errors import ErrorCode, ToolFailure

AGENT_ADDON = "eks-pod-identity-agent"
POLICY_NAME = "fsdp-eks-s3-bucket"
IDENTITY_LABEL = "s3"  # the value of ownership.STORAGE_LABEL on the ServiceAccount
_DONE: dict[str, ResourceAction] = {"create": "created", "update": "updated"}


ROLE_PREFIX = "fsdp-eks-s3-"
NAMESPACE_TAG = "fsdp-eks/namespace"


def role_name(cluster: str, namespace: str) -> str:
    """The namespace's role: readable, and unique per (cluster, namespace) within IAM's
    64 characters (a digest of both, since `a-b`+`c` and `a`+`b-c` read alike)."""
    digest = hashlib.sha256(f"{cluster}/{namespace}".encode()).hexdigest()[:10]
    return f"{ROLE_PREFIX}{f'{cluster}-{namespace}'[:41]}-{digest}"


def legacy_role_name(cluster: str) -> str:
    """The one role per cluster that releases before issue 45 made."""
    return f"{ROLE_PREFIX}{cluster}"[:64]


def trust_policy(cluster: str, namespace: str) -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "AllowEksAuthToAssumeRoleForPodIdentity",
                "Effect": "Allow",
                "Principal": {"Service": "pods.eks.amazonaws.com"},
                "Action": ["sts:AssumeRole", "sts:TagSession"],
                "Condition": {
                    "StringEquals": {
                        "aws:RequestTag/eks-cluster-name": cluster,
                        "aws:RequestTag/kubernetes-namespace": namespace,
                        "aws:RequestTag/kubernetes-service-account": S3_SERVICE_ACCOUNT,
                    }
                },
            }
        ],
    }


def bucket_policy(bucket: str) -> dict[str, Any]:
    """Read and write that one bucket: what checkpoints (torch.distributed.checkpoint
    through s3fs/boto3, multipart), datasets and served models need; nothing else."""
    arn = f"arn:aws:s3:::{bucket}"
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ListTheBucket",
                "Effect": "Allow",
                "Action": ["s3:ListBucket", "s3:GetBucketLocation"],
                "Resource": arn,
            },
            {
                "Sid": "ReadWriteItsObjects",
                "Effect": "Allow",
                "Action": [
                    "s3:GetObject",
                    "s3:PutObject",
                    "s3:DeleteObject",
                    "s3:AbortMultipartUpload",
                    "s3:ListMultipartUploadParts",
                ],
                "Resource": f"{arn}/*",
            },
        ],
    }


def _document(value: Any) -> dict[str, Any]:
    """A policy document as IAM returns it (a dict from boto3, or URL-encoded JSON)."""
    if isinstance(value, dict):
        return value
    return json.loads(unquote(str(value)))


def ensure_role(
    iam: Any, cluster: str, namespace: str, bucket: str, apply: bool
) -> tuple[ResourceChange, str | None]:
    """The role and its one inline policy: (row, role ARN or None before it exists). A
    role of the name that is not this suite's is never changed: not_ours."""
    import botocore.exceptions

    name = role_name(cluster, namespace)
    try:
        role = iam.get_role(RoleName=name)["Role"]
    except botocore.exceptions.ClientError as exc:
        if aws_error_code(exc) != "NoSuchEntity":
            raise
        role = None
    trust, access = trust_policy(cluster, namespace), bucket_policy(bucket)
    detail = f"Pod Identity role: s3://{bucket} only, for {namespace}/{S3_SERVICE_ACCOUNT}"
    if role is not None:
        tags = iam.list_role_tags(RoleName=name).get("Tags", [])
        if not ownership.ours(tags, cluster):
            raise ToolFailure(
                ErrorCode.CONFLICT,
                f"IAM role {name} exists and was not made by fsdp-eks for cluster {cluster}.",
                "Delete or rename that role, or give pods S3 access your own way.",
                {"role": name},
            )
        try:
            have = _document(
                iam.get_role_policy(RoleName=name, PolicyName=POLICY_NAME)["PolicyDocument"]
            )
        except botocore.exceptions.ClientError as exc:
            if aws_error_code(exc) != "NoSuchEntity":
                raise
            have = None
        same = have == access and _document(role.get("AssumeRolePolicyDocument")) == trust
        action: ResourceAction = "unchanged" if same else "update"
    else:
        action = "create"
    arn = role["Arn"] if role else None
    if apply and action != "unchanged":
        if role is None:
            arn = iam.create_role(
                RoleName=name,
                AssumeRolePolicyDocument=json.dumps(trust),
                Description=f"fsdp-eks pods of {cluster}/{namespace}: S3 bucket {bucket}",
                Tags=ownership.tag_list(
                    {**ownership.aws_tags(cluster, name), NAMESPACE_TAG: namespace}
                ),
            )["Role"]["Arn"]
        else:
            iam.update_assume_role_policy(RoleName=name, PolicyDocument=json.dumps(trust))
        iam.put_role_policy(
            RoleName=name, PolicyName=POLICY_NAME, PolicyDocument=json.dumps(access)
        )
        action = _DONE[action]
    return ResourceChange(kind="IAM role", name=name, action=action, detail=detail), arn


def ensure_agent(eks: Any, cluster: str, apply: bool) -> ResourceChange:
    """The eks-pod-identity-agent add-on (without it an association gives pods nothing)."""
    import botocore.exceptions

    try:
        addon = eks.describe_addon(clusterName=cluster, addonName=AGENT_ADDON)["addon"]
    except botocore.exceptions.ClientError as exc:
        if aws_error_code(exc) != "ResourceNotFoundException":
            raise
        addon = None
    if addon is not None:
        status = addon.get("status") or "state unknown"
        return ResourceChange(
            kind="EKS add-on", name=AGENT_ADDON, action="unchanged", detail=status
        )
    if not apply:
        return ResourceChange(
            kind="EKS add-on",
            name=AGENT_ADDON,
            action="create",
            detail="hands pods their role's credentials",
        )
    created = eks.create_addon(
        clusterName=cluster,
        addonName=AGENT_ADDON,
        tags=ownership.aws_tags(cluster, AGENT_ADDON),
    )["addon"]
    return ResourceChange(
        kind="EKS add-on",
        name=AGENT_ADDON,
        action="created",
        detail=created.get("status") or "CREATING",
    )


def find_association(eks: Any, cluster: str, namespace: str) -> dict[str, Any] | None:
    """The association of the suite's ServiceAccount in `namespace` (described: tags)."""
    listed = eks.list_pod_identity_associations(
        clusterName=cluster, namespace=namespace, serviceAccount=S3_SERVICE_ACCOUNT
    ).get("associations", [])
    for summary in listed:  # the filters narrow a real API's answer; read them again
        if (summary.get("namespace"), summary.get("serviceAccount")) == (
            namespace,
            S3_SERVICE_ACCOUNT,
        ):
            return eks.describe_pod_identity_association(
                clusterName=cluster, associationId=summary["associationId"]
            )["association"]
    return None


def ensure_association(
    eks: Any, cluster: str, namespace: str, role_arn: str | None, apply: bool
) -> ResourceChange:
    where = f"{namespace}/{S3_SERVICE_ACCOUNT}"
    found = find_association(eks, cluster, namespace)
    if found is not None and not ownership.ours(found.get("tags"), cluster):
        return ResourceChange(
            kind="Pod Identity association",
            name=where,
            action="keep",
            detail=f"not made by fsdp-eks: role {found.get('roleArn')}",
        )
    if found is not None and role_arn and found.get("roleArn") == role_arn:
        return ResourceChange(
            kind="Pod Identity association", name=where, action="unchanged", detail=role_arn
        )
    action: ResourceAction = "create" if found is None else "update"
    detail = f"-> {role_arn or 'the role above'}"
    if apply and action != "unchanged" and role_arn:
        if found is None:
            eks.create_pod_identity_association(
                clusterName=cluster,
                namespace=namespace,
                serviceAccount=S3_SERVICE_ACCOUNT,
                roleArn=role_arn,
                tags=ownership.aws_tags(cluster, f"{namespace}/{S3_SERVICE_ACCOUNT}"),
            )
        else:
            eks.update_pod_identity_association(
                clusterName=cluster, associationId=found["associationId"], roleArn=role_arn
            )
        action = _DONE[action]
    return ResourceChange(kind="Pod Identity association", name=where, action=action, detail=detail)


def service_account(namespace: str, bucket: str, role_arn: str | None) -> dict[str, Any]:
    """The ServiceAccount pods run as; its annotations say what its role reaches (EKS Pod
    Identity needs none: the association names it)."""
    annotations = {BUCKET_ANNOTATION: bucket}
    if role_arn:
        annotations[ROLE_ANNOTATION] = role_arn
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": S3_SERVICE_ACCOUNT,
            "namespace": namespace,
            "labels": ownership.managed_labels(**{ownership.STORAGE_LABEL: IDENTITY_LABEL}),
            "annotations": annotations,
        },
    }


def ensure_service_account(
    kube: KubeJson, namespace: str, bucket: str, role_arn: str | None, apply: bool
) -> ResourceChange:
    wanted = service_account(namespace, bucket, role_arn)
    name = f"{namespace}/{S3_SERVICE_ACCOUNT}"
    current = kube.get_or_none(object_path(wanted))
    if current is not None and not ownership.labelled_ours(current):
        return ResourceChange(
            kind="ServiceAccount",
            name=name,
            action="keep",
            detail="not made by fsdp-eks: used as it is",
        )
    have = ((current or {}).get("metadata") or {}).get("annotations") or {}
    same = current is not None and all(
        have.get(k) == v for k, v in wanted["metadata"]["annotations"].items()
    )
    action: ResourceAction = "create" if current is None else ("unchanged" if same else "update")
    detail = f"pods naming s3://{bucket} run as it"
    if apply and action != "unchanged":
        kube.apply_owned(
            wanted,
            "storage uses a ServiceAccount of that name that it did not make as it is.",
            current=current,
        )  # checked again at the write: one made meanwhile is refused, not applied over
        action = _DONE[action]
    return ResourceChange(kind="ServiceAccount", name=name, action=action, detail=detail)


# -- cleanup ----------------------------------------------------------------------------


def cleanup_rows(eks: Any, iam: Any, cluster: str, apply: bool) -> list[ResourceChange]:
    """This suite's associations for the cluster, then its roles (inline policy first).
    The add-on stays: other workloads' associations need it too."""
    rows: list[ResourceChange] = []
    named: list[str] = []  # the roles the suite's associations name
    listed = eks.list_pod_identity_associations(clusterName=cluster).get("associations", [])
    for summary in listed:
        if summary.get("serviceAccount") != S3_SERVICE_ACCOUNT:
            continue
        found = eks.describe_pod_identity_association(
            clusterName=cluster, associationId=summary["associationId"]
        )["association"]
        if not ownership.ours(found.get("tags"), cluster):
            continue
        where = f"{found.get('namespace')}/{S3_SERVICE_ACCOUNT}"
        named.append(str(found.get("roleArn") or "").rsplit("/", 1)[-1])
        if apply:
            eks.delete_pod_identity_association(
                clusterName=cluster, associationId=found["associationId"]
            )
        rows.append(
            ResourceChange(
                kind="Pod Identity association", name=where, action="deleted" if apply else "delete"
            )
        )
    ours, theirs = _suite_roles(iam, cluster, [r for r in named if r])
    for name in theirs:
        rows.append(
            ResourceChange(
                kind="IAM role",
                name=name,
                action="keep",
                detail="not created by fsdp-eks for this cluster",
            )
        )
    for name in ours:
        if apply:
            for policy in iam.list_role_policies(RoleName=name).get("PolicyNames", []):
                iam.delete_role_policy(RoleName=name, PolicyName=policy)
            for attached in iam.list_attached_role_policies(RoleName=name).get(
                "AttachedPolicies", []
            ):
                iam.detach_role_policy(RoleName=name, PolicyArn=attached["PolicyArn"])
            iam.delete_role(RoleName=name)
        rows.append(
            ResourceChange(kind="IAM role", name=name, action="deleted" if apply else "delete")
        )
    return rows


def _suite_roles(iam: Any, cluster: str, named: list[str]) -> tuple[list[str], list[str]]:
    """This suite's S3 roles for `cluster`: the ones its associations named and any other
    of the prefix (a namespace whose association is gone, the older per-cluster role),
    each tagged as this suite's for this cluster; and the roles its associations named
    that are not (kept, and said so). Others of the prefix are not this cluster's."""
    import botocore.exceptions

    candidates = dict.fromkeys(named)
    for page in iam.get_paginator("list_roles").paginate():
        for role in page.get("Roles", []):
            if str(role.get("RoleName", "")).startswith(ROLE_PREFIX):
                candidates[role["RoleName"]] = None
    ours, theirs = [], []
    for name in candidates:
        try:
            tags = iam.list_role_tags(RoleName=name).get("Tags", [])
        except botocore.exceptions.ClientError as exc:
            if aws_error_code(exc) != "NoSuchEntity":
                raise
            continue
        if ownership.ours(tags, cluster):
            ours.append(name)
        elif name in named:
            theirs.append(name)
    return ours, theirs
