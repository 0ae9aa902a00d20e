"""Who a Kubernetes job's pods are to AWS: the ServiceAccount a job that names s3://
paths runs as (its EKS Pod Identity role), in words for the plan, and required when
submitting (a pod naming a missing ServiceAccount is never created)."""

from __future__ import annotations

from typing import Any

from skills.kube.identity import MAKE_IT, reach_warnings, s3_buckets
from skills.kube.objects import kind_path
from skills.shared.errors import ErrorCode, ToolFailure
from skills.training_job_deployer.targets.kubernetes.engine import Engine, flag_values
from skills.training_job_deployer.targets.kubernetes.kube_monitor import KubeReader


def identity_text(namespace: str, account: str | None, buckets: list[str]) -> str:
    if account is None:
        return f"ServiceAccount {namespace}/default: no AWS role of its own (the node's)"
    named = ", ".join(f"s3://{b}" for b in buckets)
    return (
        f"ServiceAccount {namespace}/{account}: the EKS Pod Identity role manage_eks_cluster "
        f"action=storage binds to its bucket (the job names {named})"
    )


def manifest_s3_paths(engine: Engine, manifest: dict[str, Any]) -> list[str]:
    """The values of the trainer's path flags in the job's container commands."""
    flags = {"--model_name_or_path", "--dataset", "--tokenizer", "--checkpoint_dir"}
    return flag_values(engine.commands(manifest), flags)


def require_service_account(
    reader: KubeReader, account: str | None, s3_paths: list[str]
) -> list[str]:
    """A pod naming a ServiceAccount that does not exist is never created (the API's
    admission refuses it, and the job waits without pods): refused here instead. The
    warnings of what the account cannot reach of the job's s3:// paths come back."""
    if not account:
        return []
    namespace = reader.namespace
    found = reader.get_or_none(kind_path("ServiceAccount", namespace, account))
    if found is None:
        raise ToolFailure(
            ErrorCode.NOT_FOUND,
            f"The job names s3:// paths; its pods run as ServiceAccount "
            f"{namespace}/{account}, which does not exist.",
            f"{MAKE_IT}; then deploy again.",
            {"namespace": namespace, "service_account": account},
        )
    return reach_warnings(s3_buckets(s3_paths), namespace, found, True)
