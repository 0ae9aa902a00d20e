"""How every tool that reaches a cluster takes it: one pydantic model, ClusterAccess,
with one grammar per field (the job, model-server and EKS cluster tools alike: a name
one of them accepts, every one accepts). The checks are validators, not schema
patterns: the same rule with no bytes in every tools/list."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, Field, model_validator

from skills.cloud.clients import aws_session
from skills.kube.access import cluster_api_client
from skills.shared.errors import needs_field
from skills.shared.paths import LocalPath
from skills.shared.validators import grammar

DNS_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"  # an object name (RFC 1123 subdomain)
DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"  # a namespace (RFC 1123 label)
# What EKS itself takes for a cluster name (CreateCluster: 1-100 characters,
# ^[0-9A-Za-z][A-Za-z0-9\-_]*$): no `.`.
EKS_CLUSTER_NAME = r"[0-9A-Za-z][A-Za-z0-9_-]{0,99}"
REGION = r"[a-z]{2}(-[a-z]+)+-\d"


def _no_control_characters(value: str | None) -> str | None:
    if value is not None and any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError("no control characters")
    return value


_TEXT = AfterValidator(_no_control_characters)

ClusterName = Annotated[
    str | None,
    Field(description="EKS cluster name."),
    grammar(EKS_CLUSTER_NAME, "an EKS cluster name"),
]
Region = Annotated[str | None, Field(description="AWS region."), grammar(REGION, "a region")]
Kubeconfig = Annotated[
    str | None,
    Field(min_length=1, max_length=4096, description="kubeconfig path (default KUBECONFIG)."),
    _TEXT,
    LocalPath(writable=False),
]
# manage_eks_cluster's: action=kubeconfig writes this file (the same grammar).
KubeconfigWrite = Annotated[
    str | None,
    Field(min_length=1, max_length=4096, description="kubeconfig; action=kubeconfig writes it."),
    _TEXT,
    LocalPath(writable=True),
]
KubeContext = Annotated[
    str | None, Field(min_length=1, max_length=253, description="kubeconfig context."), _TEXT
]
Namespace = Annotated[
    str, Field(description="Kubernetes namespace."), grammar(DNS_LABEL, "a namespace")
]

_WAYS_IN = ("cluster_name", "region", "kubeconfig", "context")


class ClusterAccess(BaseModel):
    """How a tool reaches its cluster (flattened into its inputs, or mixed into a target's
    settings): an EKS cluster_name, or a kubeconfig and context, and the namespace. What
    runs there reads its paths in the pods, not on this host."""

    cluster_name: ClusterName = None
    region: Region = None
    kubeconfig: Kubeconfig = None
    context: KubeContext = None
    namespace: Namespace = "default"

    # Here cluster_name and kubeconfig/context are two ways into one Kubernetes API:
    # given both, one would be ignored, so both is refused.
    cluster_name_with_kubeconfig: ClassVar[bool] = False

    @property
    def job_runs_here(self) -> bool:
        return False

    @model_validator(mode="after")
    def _one_way_in(self) -> ClusterAccess:
        both = self.cluster_name and (self.kubeconfig or self.context)
        if both and not self.cluster_name_with_kubeconfig:
            raise ValueError("give cluster_name, or kubeconfig/context, not both")
        return self

    def access_args(self) -> dict[str, Any]:
        """This cluster as a follow-up call's arguments (the fields given, a namespace
        other than the default)."""
        args = {k: getattr(self, k) for k in _WAYS_IN if getattr(self, k) is not None}
        if self.namespace != "default":
            args["namespace"] = self.namespace
        return args

    def api_client(self) -> Any:
        """Its Kubernetes API client (kubeconfig/context when given, else EKS by name)."""
        return cluster_api_client(
            self.cluster_name, self.region, None, self.kubeconfig, self.context
        )

    def session(self) -> Any:
        return aws_session(None, self.region)

    def need_cluster(self, action: str) -> str:
        if not self.cluster_name:
            raise needs_field(
                action,
                "cluster_name",
                "Pass cluster_name (and region, or set AWS_REGION).",
                what=" (an EKS cluster)",
            )
        return self.cluster_name

    def identity(self) -> str | None:
        """The caller's AWS identity, for an EKS cluster reached by name."""
        if not self.cluster_name or self.kubeconfig or self.context:
            return None
        return self.session().client("sts").get_caller_identity().get("Arn")


class EksClusterAccess(ClusterAccess):
    """The EKS cluster tools' access (inspect_eks_cluster). The same fields and rules,
    but cluster_name names the cluster for the AWS calls (node groups, FSx, S3, IAM, the
    kubeconfig to write) while kubeconfig/context, when given, reach its Kubernetes API
    (a private endpoint, a proxy): both together are two roles, not two ways in."""

    cluster_name_with_kubeconfig: ClassVar[bool] = True


class EksClusterWriteAccess(EksClusterAccess):
    """manage_eks_cluster's: its kubeconfig may be written (action=kubeconfig)."""

    kubeconfig: KubeconfigWrite = None
