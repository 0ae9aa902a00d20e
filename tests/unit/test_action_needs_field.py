"""Each cluster action called without a field it needs is the same invalid_input
(skills.shared.errors.needs_field): "action=X needs field", the field named in
details.problems, refused before any cluster or AWS API is asked (no services here)."""

from __future__ import annotations

import pytest

from commands.inspect_eks_cluster import inspect_eks_cluster
from commands.manage_eks_cluster import manage_eks_cluster
from skills.shared.errors import ToolFailure

CLUSTER = {"cluster_name": "c1", "region": "us-east-1"}


@pytest.mark.parametrize(
    "tool, call, field, action",
    [  # a row per action and the field it needs
        (manage_eks_cluster, {"action": "scale", **CLUSTER}, "nodegroup", "scale"),
        (manage_eks_cluster, {"action": "scale", "nodegroup": "g"}, "cluster_name", "scale"),
        (manage_eks_cluster, {"action": "kubeconfig", **CLUSTER}, "kubeconfig", "kubeconfig"),
        (manage_eks_cluster, {"action": "storage"}, "cluster_name", "storage"),
        (manage_eks_cluster, {"action": "cleanup"}, "cluster_name", "cleanup"),
        (manage_eks_cluster, {"action": "nccl_test", "image": "i:1"}, "instance_type", "nccl_test"),
        (manage_eks_cluster, {"action": "nccl_test", "instance_type": "p5.48xlarge"}, "image",
         "nccl_test"),
        (manage_eks_cluster, {"action": "create_config", **CLUSTER}, "instance_type",
         "create_config"),
        (manage_eks_cluster, {"action": "create_config", "instance_type": "p5.48xlarge"},
         "cluster_name", "create_config"),
        (manage_eks_cluster, {"action": "create_config", "instance_type": "p5.48xlarge",
                              "confirm": True, **CLUSTER}, "output", "create_config with confirm"),
        (inspect_eks_cluster, {"action": "nccl_test"}, "nccl_output", "nccl_test"),
    ],
)  # fmt: skip
def test_an_action_without_its_field_is_one_invalid_input(tool, call, field, action, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing may be asked
    with pytest.raises(ToolFailure) as refused:
        tool(**call)
    failure = refused.value
    assert failure.code == "invalid_input"
    assert failure.message.startswith(f"action={action} needs {field}")
    assert failure.details["problems"] == [{"field": field, "problem": f"required for {action}"}]
