"""manage_eks_cluster's action parameters are declared once, on each action's spec
(issue 50): every spec field is a tool parameter with the spec's own description (its
first clause in the MCP schema, all of it in the CLI) and rules, a value given to the
tool reaches the action's spec unchanged, and a plan's confirm step calls back with
every parameter it was planned with. A field two specs share is one parameter only
when declared through one alias."""

from __future__ import annotations

from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field, ValidationError

from commands._cli import build_parser
from commands.manage_eks_cluster import manage_eks_cluster
from mcp_server.listing import input_schema, one_line
from skills.eks_cluster_manager import actions
from skills.eks_cluster_manager.cleanup import CleanupSpec
from skills.eks_cluster_manager.create_config import ConfigSpec
from skills.eks_cluster_manager.nccl_gate import NcclSpec
from skills.eks_cluster_manager.nodegroups import ScaleSpec
from skills.eks_cluster_manager.params import within
from skills.eks_cluster_manager.storage import StorageSpec
from skills.kube.fields import EksClusterAccess
from skills.shared.errors import ToolFailure
from skills.shared.results import ToolResult
from skills.shared.tooling import Flatten, spec_of, tool

TOOL = spec_of(manage_eks_cluster)
SPECS = [StorageSpec, CleanupSpec, ScaleSpec, NcclSpec, ConfigSpec]
# A value other than the default for every parameter (a new field needs one here).
GIVEN: dict[type[BaseModel], dict[str, Any]] = {
    StorageSpec: {
        "fsx_size_gib": 4800,
        "fsx_deployment_type": "PERSISTENT_2",
        "fsx_throughput": 125,
        "bucket": "team-data",
        "nodegroup": "gpu",
    },
    CleanupSpec: {
        "only": ["fsx", "jobs"],
        "bucket": "team-data",
        "delete_bucket": "if_empty",
        "delete_cluster": True,
    },
    ScaleSpec: {"nodegroup": "gpu", "min_size": 1, "max_size": 4, "desired_size": 2},
    NcclSpec: {
        "nodes": 4,
        "instance_type": "p5.48xlarge",
        "image": "r.invalid/nccl:1",
        "nccl_output": "nccl.txt",
    },
    ConfigSpec: {
        "instance_type": "p5.48xlarge",
        "nodes": 4,
        "volume_size": 900,
        "capacity_reservation_id": "cr-0123456789abcdef0",
        "output": "c.yaml",
        "kubernetes_version": "1.31",
    },
}
PARAM_OF = {
    StorageSpec: "storage",
    CleanupSpec: "cleanup",
    ScaleSpec: "scale",
    NcclSpec: "nccl",
    ConfigSpec: "config",
}
ACCESS = EksClusterAccess(cluster_name="c1", region="us-east-1")


def _cli_help() -> dict[str, str]:
    parser = build_parser(TOOL)
    return {flag: action.help or "" for action in parser._actions for flag in action.option_strings}


@pytest.mark.parametrize("model", SPECS, ids=lambda m: m.__name__)
def test_every_spec_field_is_a_tool_parameter_with_its_description_and_rules(model):
    schema = input_schema(TOOL)["properties"]
    flags = _cli_help()
    for name, field in model.model_fields.items():
        assert schema[name]["description"] == one_line(field.description or ""), name
        assert flags[f"--{name}"].startswith(field.description or "-"), name
        assert TOOL.params.model_fields[name].metadata == field.metadata, name  # its validators
        assert TOOL.params.model_fields[name].default == field.default, name


@pytest.mark.parametrize("model", SPECS, ids=lambda m: m.__name__)
def test_a_value_given_to_the_tool_reaches_the_actions_spec(model):
    assert set(GIVEN[model]) == set(model.model_fields), "name a value for each new field"
    raw = {"action": "validate", **ACCESS.access_args(), **GIVEN[model]}
    kwargs = TOOL.call_kwargs(TOOL.parse(raw))
    assert kwargs[PARAM_OF[model]] == model(**GIVEN[model])


@pytest.mark.parametrize(
    ("model", "bad"),
    [
        (StorageSpec, {"fsx_size_gib": 100}),
        (ScaleSpec, {"min_size": -1}),
        (ConfigSpec, {"capacity_reservation_id": "cr-x"}),
        (CleanupSpec, {"only": ["vpc"]}),
    ],
)
def test_a_value_the_spec_refuses_is_refused_by_the_tool_naming_the_parameter(model, bad):
    (name,) = bad
    with pytest.raises(ValidationError) as caught:
        model(**bad)
    assert caught.value.errors()[0]["loc"][0] == name
    with pytest.raises(ToolFailure) as refused:
        TOOL.parse({"action": "validate", **bad})
    problems = refused.value.details["problems"]
    fields = [p["field"].split(".")[0] for p in problems]  # only.0: the list's first item
    assert refused.value.code == "invalid_input" and fields == [name]


def _called_back(arguments: dict[str, Any]) -> dict[str, Any]:
    """The plan's next step (its arguments, confirmed) as the tool would receive it."""
    return TOOL.call_kwargs(TOOL.parse({**arguments, "confirm": True}))


def test_a_storage_plans_confirm_step_calls_back_with_every_parameter_it_was_planned_with():
    planned = StorageSpec(**GIVEN[StorageSpec])
    arguments = actions._storage_args(ACCESS, planned.placed("c1", "team", "ckpt"))
    again = _called_back(arguments)
    assert again["storage"] == planned
    assert (again["access"].namespace, again["checkpoint_pvc"]) == ("team", "ckpt")


def test_a_cleanup_plans_confirm_step_calls_back_with_every_parameter_it_was_planned_with():
    planned = CleanupSpec(**GIVEN[CleanupSpec])
    assert _called_back(actions._cleanup_args(ACCESS, planned))["cleanup"] == planned
    assert planned.parts == ("jobs", "fsx")  # in deletion order, whatever order was given


class _Result(ToolResult):
    pass


Shared = Annotated[int, Field(description="n."), within(1, 9)]


class _One(BaseModel):
    n: Shared = 1


class _Other(BaseModel):
    n: Shared = 1


class _Alike(BaseModel):
    n: Annotated[int, Field(description="n."), within(1, 9)] = 1  # declared again


def test_a_field_two_specs_declare_through_one_alias_is_one_parameter_feeding_both():
    @tool(read_only=True)
    def both(*, one: Annotated[_One, Flatten()], other: Annotated[_Other, Flatten()]) -> _Result:
        return _Result()

    spec = spec_of(both)
    kwargs = spec.call_kwargs(spec.parse({"n": 3}))
    assert kwargs == {"one": _One(n=3), "other": _Other(n=3)}


def test_a_field_declared_twice_even_alike_is_refused_when_the_tool_is_built():
    with pytest.raises(TypeError, match="named twice"):

        @tool(read_only=True)
        def twice(
            *, one: Annotated[_One, Flatten()], again: Annotated[_Alike, Flatten()]
        ) -> _Result:
            return _Result()
