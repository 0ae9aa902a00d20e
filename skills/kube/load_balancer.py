"""The AWS Load Balancer Controller: what turns a Service of type LoadBalancer with the
`aws-load-balancer-type: external` annotation (the model server's) into an NLB. EKS does
not install it; without it such a Service waits for an address forever. The suite does
not install it either (its upstream manifests are not ours to ship): the check says how,
with the Helm chart AWS documents ("Install AWS Load Balancer Controller with Helm")."""

from __future__ import annotations

from typing import Any

from skills.kube.deployments import deployment_ready

CONTROLLER = "aws-load-balancer-controller"  # the chart's Deployment and service account


# One string constant (the hint-flag scan reads the helm command whole): the chart, then
# its IAM role (IRSA or Pod Identity); <cluster> is replaced by the cluster's name.
INSTALL_HINT = (
    "Install the AWS Load Balancer Controller: `helm repo add eks "
    "https://aws.github.io/eks-charts && helm repo update eks && helm install "
    "aws-load-balancer-controller eks/aws-load-balancer-controller -n kube-system --set "
    "clusterName=<cluster> --set serviceAccount.name=aws-load-balancer-controller` with an "
    "IAM role for that service account (AWS's AWSLoadBalancerControllerIAMPolicy); or use "
    "service_type=ClusterIP (reached through the API server's proxy)."
)


def install_hint(cluster_name: str | None) -> str:
    """The exact commands, one line."""
    return INSTALL_HINT.replace("<cluster>", cluster_name) if cluster_name else INSTALL_HINT


def controllers(deployments: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The controller's Deployments among `deployments` (any namespace)."""
    return [d for d in deployments if (d.get("metadata") or {}).get("name") == CONTROLLER]


def ready(deployment: dict[str, Any]) -> bool:
    return deployment_ready(deployment)[0]
