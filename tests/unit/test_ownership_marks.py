"""The one ownership check (skills.shared.ownership), row by row: which marks make an
AWS resource or a Kubernetes object this suite's, and the typed refusal otherwise."""

from __future__ import annotations

import pytest

from skills.shared import ownership
from skills.shared.errors import ToolFailure

SUITE = {"created-by": "fsdp-eks"}
MANAGED = {"app.kubernetes.io/managed-by": "fsdp-eks"}

# (tags, cluster asked, why it is not ours, or None)
AWS_ROWS = [
    ({**SUITE, "fsdp-eks/cluster": "a"}, "a", None),
    ([{"Key": "created-by", "Value": "fsdp-eks"}, {"Key": "fsdp-eks/cluster", "Value": "a"}],
     "a", None),
    ({**SUITE, "fsdp-eks/cluster": "b"}, "a", "fsdp-eks made it for cluster 'b'"),
    (SUITE, "a", "it has no cluster tag"),
    (SUITE, None, None),  # what has no cluster tag (the cluster, eksctl's node groups)
    ({"fsdp-eks/cluster": "a"}, "a", "not created by fsdp-eks (no created-by tag)"),
    ({"created-by": "someone"}, None, "not created by fsdp-eks (no created-by tag)"),
    (None, "a", "not created by fsdp-eks (no created-by tag)"),
    ("created-by=fsdp-eks", "a", "not created by fsdp-eks (no created-by tag)"),  # not tags
    ([{"Key": "created-by", "Value": ["fsdp-eks"]}], None,
     "not created by fsdp-eks (no created-by tag)"),  # a hostile shape is no tag
]  # fmt: skip


@pytest.mark.parametrize(("tags", "cluster", "why"), AWS_ROWS)
def test_aws_ownership(tags, cluster, why):
    assert ownership.why_not_ours_aws(tags, cluster) == why
    if why is None:
        ownership.require_aws_ours(tags, "S3 bucket", "b", cluster, "hint")
    else:
        with pytest.raises(ToolFailure) as caught:
            ownership.require_aws_ours(tags, "S3 bucket", "b", cluster, "Name another.")
        assert caught.value.code == "not_ours" and caught.value.hint == "Name another."
        assert caught.value.details == {"kind": "S3 bucket", "name": "b", "why": why}


def _obj(labels, namespace="ns"):
    return {"metadata": {"name": "x", "namespace": namespace, "labels": labels}}


SERVER = "fsdp-eks/model-server"
# (object, label, value, namespace, why it is not ours, or None)
KUBE_ROWS = [
    (_obj({**MANAGED, SERVER: "web"}), SERVER, "web", "ns", None),
    (_obj(MANAGED), None, None, None, None),
    (_obj({"app": "web"}), SERVER, "web", "ns", "no app.kubernetes.io/managed-by=fsdp-eks label"),
    (_obj({"app.kubernetes.io/managed-by": "Helm", SERVER: "web"}), SERVER, "web", "ns",
     "no app.kubernetes.io/managed-by=fsdp-eks label"),
    (_obj(MANAGED), SERVER, "web", "ns", "no fsdp-eks/model-server label"),
    (_obj({**MANAGED, SERVER: "api"}), SERVER, "web", "ns",
     "its fsdp-eks/model-server label is 'api', not 'web'"),
    (_obj({**MANAGED, SERVER: "web"}, "other"), SERVER, "web", "ns",
     "it is in namespace 'other', not 'ns'"),
    ({"metadata": {"labels": ["not", "a", "map"]}}, None, None, None,
     "no app.kubernetes.io/managed-by=fsdp-eks label"),
    ({"metadata": None}, None, None, None, "no app.kubernetes.io/managed-by=fsdp-eks label"),
    ([], None, None, None, "no app.kubernetes.io/managed-by=fsdp-eks label"),
]  # fmt: skip


@pytest.mark.parametrize(("obj", "label", "value", "namespace", "why"), KUBE_ROWS)
def test_kubernetes_ownership(obj, label, value, namespace, why):
    assert ownership.why_not_ours_kube(obj, label, value, namespace) == why
    check = lambda: ownership.require_kube_ours(  # noqa: E731
        obj, "Deployment", "ns/web", "hint", label=label, value=value, namespace=namespace
    )
    if why is None:
        check()
    else:
        with pytest.raises(ToolFailure) as caught:
            check()
        assert caught.value.code == "not_ours" and caught.value.exit_status == 2
        assert caught.value.message.startswith("Deployment ns/web exists and is not this suite's")


def test_a_missing_object_is_nothing_to_refuse():
    ownership.require_kube_ours(None, "Service", "ns/web", "hint", label=SERVER, value="web")
