"""Every tool that reaches a cluster takes it the same way (skills.kube.fields.ClusterAccess):
a cluster name one tool accepts, every one accepts; one it refuses, every one refuses, naming
the field. The tools are found by their inputs, not listed, so a new cluster tool is held to
the same grammar."""

from __future__ import annotations

import typing

import pytest

from commands import all_tools
from skills.kube.fields import ClusterAccess, EksClusterAccess
from skills.shared.errors import ToolFailure
from skills.shared.tooling import ToolSpec

CLUSTER_TOOLS = [spec for spec in all_tools() if "cluster_name" in spec.params.model_fields]
EKS_TOOLS = {"inspect_eks_cluster", "manage_eks_cluster"}


def _parse(spec: ToolSpec, **access: str) -> None:
    """The tool's inputs parsed and its models rebuilt (nothing runs)."""
    raw: dict[str, object] = dict(access)
    if "target" in spec.params.model_fields:
        raw["target"] = "kubernetes"
    for name, field in spec.params.model_fields.items():
        if field.is_required():
            # A name the tool needs (job_name, name, model): any valid one; a choice
            # (transfer_job_artifacts' action): its first.
            choices = (
                typing.get_args(field.annotation)
                if typing.get_origin(field.annotation) is typing.Literal
                else ()
            )
            raw[name] = choices[0] if choices else "x"
    spec.call_kwargs(spec.parse(raw))


def _refused(spec: ToolSpec, **access: str) -> list[dict[str, str]]:
    with pytest.raises(ToolFailure) as caught:
        _parse(spec, **access)
    assert caught.value.code == "invalid_input"
    return caught.value.details["problems"]


def test_every_kind_of_cluster_tool_is_found():
    names = {spec.name for spec in CLUSTER_TOOLS}
    assert EKS_TOOLS <= names
    assert {"deploy_training_job", "get_training_job", "diagnose_training_job"} <= names
    assert {"deploy_model_server", "get_model_server", "list_model_servers"} <= names


# EKS's own grammar (CreateCluster): 1-100 characters, ^[0-9A-Za-z][A-Za-z0-9\-_]*$.
TAKEN = ["a", "my-cluster", "Team_1-prod", "0abc", "a" * 100]
REFUSED = ["my.cluster", "-lead", "_lead", "a" * 101, "has space", "ünï", "a/b", ""]


@pytest.mark.parametrize("spec", CLUSTER_TOOLS, ids=lambda s: s.name)
@pytest.mark.parametrize("name", TAKEN)
def test_every_cluster_tool_takes_an_eks_name(spec, name):
    _parse(spec, cluster_name=name, region="us-west-2")


@pytest.mark.parametrize("spec", CLUSTER_TOOLS, ids=lambda s: s.name)
@pytest.mark.parametrize("name", REFUSED, ids=repr)
def test_every_cluster_tool_refuses_a_name_eks_refuses(spec, name):
    problems = _refused(spec, cluster_name=name)
    assert [p["field"] for p in problems] == ["cluster_name"]


@pytest.mark.parametrize("spec", CLUSTER_TOOLS, ids=lambda s: s.name)
@pytest.mark.parametrize(
    ("field", "value"),
    [("region", "us_west_2"), ("namespace", "ml.team"), ("namespace", "A"),
     ("context", "ctx\nx"), ("kubeconfig", "kc\x00")],
)  # fmt: skip
def test_every_cluster_tool_refuses_the_same_bad_access(spec, field, value):
    problems = _refused(spec, **{field: value})
    assert [p["field"] for p in problems] == [field]


@pytest.mark.parametrize("spec", CLUSTER_TOOLS, ids=lambda s: s.name)
def test_cluster_name_with_a_kubeconfig(spec):
    """Job and model-server tools: two ways into one API, one would be ignored: refused.
    EKS tools: cluster_name names the AWS side, the kubeconfig reaches its API: taken."""
    both = {"cluster_name": "c", "kubeconfig": "/k"}
    if spec.name in EKS_TOOLS:
        _parse(spec, **both)
    else:
        problems = _refused(spec, **both)
        assert "not both" in problems[0]["problem"]


def test_access_args_are_what_a_follow_up_call_takes():
    access = EksClusterAccess(cluster_name="c", region="us-east-1", namespace="ml")
    assert access.access_args() == {"cluster_name": "c", "region": "us-east-1", "namespace": "ml"}
    assert ClusterAccess(kubeconfig="/k").access_args() == {"kubeconfig": "/k"}
    assert ClusterAccess.model_validate(access.access_args()).cluster_name == "c"
