"""Who a pod is to AWS: the ServiceAccount that manage_eks_cluster action=storage binds,
through EKS Pod Identity, to an IAM role that reaches the suite's S3 bucket and nothing
else. One home for its name and marks, read by the jobs and model servers that name an
s3:// path (feature skills do not import each other)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

S3_SERVICE_ACCOUNT = "fsdp-eks-s3"
# The ServiceAccount says what its role reaches, so a plan can tell whether a pod's
# s3:// paths are within it without reading IAM.
BUCKET_ANNOTATION = "fsdp-eks/s3-bucket"
ROLE_ANNOTATION = "fsdp-eks/iam-role"
MAKE_IT = (
    "manage_eks_cluster action=storage (confirm=true) creates it: an IAM role for the "
    "bucket, its EKS Pod Identity association and this ServiceAccount"
)


def s3_buckets(paths: Iterable[str | None]) -> list[str]:
    """The buckets of the s3:// paths among `paths`, in order, once each."""
    found = (p.removeprefix("s3://").split("/", 1)[0] for p in paths if p and p.startswith("s3://"))
    return list(dict.fromkeys(found))


def service_account_bucket(account: dict[str, Any] | None) -> str | None:
    """The bucket a ServiceAccount (as the API returns it) says its role reaches."""
    annotations = ((account or {}).get("metadata") or {}).get("annotations") or {}
    return annotations.get(BUCKET_ANNOTATION)


def reach_warnings(
    buckets: list[str], namespace: str, account: dict[str, Any] | None, checked: bool
) -> list[str]:
    """What a pod that names `buckets` cannot reach as `S3_SERVICE_ACCOUNT` (None: it does
    not exist); `checked` False: the cluster could not be asked."""
    if not buckets:
        return []
    where = f"{namespace}/{S3_SERVICE_ACCOUNT}"
    if not checked:
        return [f"ServiceAccount {where} not checked (cluster not reachable): {MAKE_IT}"]
    if account is None:
        return [
            f"no ServiceAccount {where}: nothing gives the pod access to "
            f"{', '.join('s3://' + b for b in buckets)}; {MAKE_IT}"
        ]
    reached = service_account_bucket(account)
    others = [b for b in buckets if b != reached]
    if not others:
        return []
    return [
        f"{where}'s role reaches s3://{reached} only: "
        f"{', '.join('s3://' + b for b in others)} will answer AccessDenied unless the "
        "node's role grants it (run action=storage with bucket=<that bucket>)"
    ]
