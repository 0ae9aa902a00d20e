"""Every next step is a complete call (issue 21): each tool's results and failures that
carry a `next_step`, driven through the MCP server where that is cheap (dry runs,
refusals, moto, the Kubernetes emulator) and otherwise built by the code that makes
them, nested as the server sends them and validated against the named tool's
tools/list inputSchema: required arguments present, types right, no unknown
properties. A tool added to the suite fails here until its next steps are listed."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import jsonschema
import pytest
from mcp import Client

from commands import all_tools, tool_spec
from mcp_server import build_server
from mcp_server.server import MCP_MAX_WAIT_S
from skills.codebuild_pipeline import builds
from skills.ecr_publisher.to_ecr import deploy_step
from skills.eks_cluster_manager import actions
from skills.eks_cluster_manager.cleanup import CleanupSpec
from skills.eks_cluster_manager.storage import StorageSpec
from skills.image_builder.project import push_step
from skills.kube.fields import EksClusterAccess
from skills.model_server.kubernetes.settings import KubernetesServerAccess
from skills.model_server.kubernetes.target import _access as server_access
from skills.operations.operation_state import OperationRecord, OperationState
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.next_step import NextStep
from skills.training_job_deployer.models import JobState
from skills.training_job_deployer.targets.kubernetes.settings import KubernetesSettings
from skills.training_job_deployer.targets.kubernetes.target import KubernetesTarget
from skills.training_job_deployer.targets.local.target import LocalSettings, LocalTarget
from skills.training_job_deployer.targets.slurm.settings import SlurmSettings
from skills.training_job_deployer.targets.slurm.target import SlurmTarget

pytestmark = pytest.mark.integration

SERVER = build_server()
SCHEMAS: dict[str, dict[str, Any]] = {}  # tools/list's, filled on first use
# Tools whose results carry no next step of their own (a list holds job states, whose
# steps the job tools' entries cover).
NO_NEXT_STEP = {"diagnose_training_job", "get_training_job_logs", "list_training_jobs",
                "list_operations"}  # fmt: skip


def _strict(schema: Any) -> Any:
    """The listed schema with no unknown property allowed at any depth (the server
    refuses them; the listing leaves additionalProperties out to save bytes)."""
    if isinstance(schema, dict):
        schema = {key: _strict(value) for key, value in schema.items()}
        if "properties" in schema:
            schema.setdefault("additionalProperties", False)
    return schema


def _schemas() -> dict[str, dict[str, Any]]:
    async def listed():
        async with Client(SERVER) as client:
            return (await client.list_tools()).tools

    tools = [t.model_dump(mode="json", by_alias=True) for t in anyio.run(listed)]
    return {tool["name"]: _strict(copy.deepcopy(tool["inputSchema"])) for tool in tools}


def _call(name: str, arguments: dict[str, Any]) -> Any:
    async def call():
        async with Client(SERVER) as client:
            return await client.call_tool(name, arguments)

    return anyio.run(call)


def _sent_step(result: Any) -> dict[str, Any] | None:
    """The next step as a call's result or failure carries it."""
    if result.is_error:
        return json.loads(result.content[0].text)["error"].get("next_step")
    return (result.structured_content or {}).get("next_step")


def _nested(step: Any) -> dict[str, Any]:
    return SERVER.nest_step(step.model_dump())


def _check(step: dict[str, Any], source: str) -> None:
    global SCHEMAS
    SCHEMAS = SCHEMAS or _schemas()
    assert step["tool"] in SCHEMAS, f"{source}: no tool {step['tool']!r}"
    errors = sorted(
        jsonschema.Draft202012Validator(SCHEMAS[step["tool"]]).iter_errors(step["arguments"]),
        key=str,
    )
    assert not errors, f"{source} -> {step['tool']}: {[e.message for e in errors]}"
    # Under every client's request timeout (the TypeScript SDK's is 60 s): issue 32.
    wait = step["arguments"].get("wait_seconds")
    assert wait is None or wait <= MCP_MAX_WAIT_S, f"{source}: waits {wait} s in one call"


def _confirm_step(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The next step ToolSpec attaches to a confirmation_required failure of `tool`."""
    failure = ToolFailure(ErrorCode.CONFIRMATION_REQUIRED, "needs confirm", "confirm it")
    spec = tool_spec(tool)
    spec._confirm_step(failure, arguments)
    assert failure.next_step is not None
    return _nested(failure.next_step)


def _running_operation(tool: str) -> dict[str, Any]:
    record = OperationRecord(
        operation_id=f"{tool}-20261124-070000-abcdef", tool=tool, entry="m:f", arguments={},
        cwd="/", created_at=0, updated_at=0,
    )  # fmt: skip
    step = OperationState.of(record).next_step
    assert step is not None
    return _nested(step)


def _job(status: str, target: Any, **fields: Any) -> dict[str, Any]:
    state = JobState(job_name="j1", target=target.name, status=status, **fields)  # type: ignore[arg-type]
    if isinstance(target, KubernetesTarget):
        target.with_next_step(state)
    else:
        state.suggest_next_step(target.call_args())
    assert state.next_step is not None, (status, target.name)
    return _nested(state.next_step)


KUBE = KubernetesTarget(KubernetesSettings(kubeconfig="/tmp/kc", context="c", namespace="ml"))
EKS = KubernetesTarget(KubernetesSettings(cluster_name="gpu", region="us-west-2"))


def _job_steps(tmp_path: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    local = LocalTarget(LocalSettings(runs_dir=str(tmp_path / "runs")))
    slurm = SlurmTarget(SlurmSettings(target="slurm", ssh_host="login1", runs_dir="/shared/runs"))
    for target in (local, slurm, KUBE, EKS):
        yield f"running job on {target.name}", _job("running", target)
    yield "failed job on kubernetes", _job("failed", KUBE)
    yield "failed job with a checkpoint", _job("failed", EKS, checkpoint_step=40)


def _deploy_steps(tmp_path: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    kc = str(tmp_path / "kc")
    for name, args in {
        "local dry run": {"local": {"runs_dir": str(tmp_path)}, "gpu_per_node": 2},
        "kubernetes dry run": {
            "kubernetes": {"kubeconfig": kc, "image_uri": "r.invalid/t:1", "namespace": "ml"},
            "num_nodes": 2, "auto_retry": True,
        },
    }.items():  # fmt: skip
        result = _call("deploy_training_job", {"job_name": "ns", "dry_run": True, **args})
        assert not result.is_error, result.content[0].text
        step = _sent_step(result)
        assert step is not None and step["arguments"]["job_name"] == "ns"
        assert "dry_run" not in step["arguments"]  # the same call, submitted
        yield name, step
        # the step as sent is a call the server takes (a dry run of it plans the same)
        again = _call(step["tool"], {**step["arguments"], "dry_run": True})
        assert (
            not again.is_error
            and again.structured_content["plan"] == (result.structured_content["plan"])
        )
    over = _call("deploy_training_job", {"job_name": "ns", "dry_run": True, "gpu_per_node": 8,
                 "kubernetes": {"kubeconfig": kc, "instance_type": "g5.12xlarge"}})  # fmt: skip
    assert over.is_error and (step := _sent_step(over)) is not None, over.content[0].text
    yield "kubernetes: more GPUs per node than the instance has", step
    yield (
        "kubernetes: confirm to replace",
        _confirm_step(
            "deploy_training_job",
            {"job_name": "ns", "target": "kubernetes", "kubeconfig": kc, "replace": True},
        ),
    )
    yield "running operation", _running_operation("deploy_training_job")


def _refusals() -> Iterator[tuple[str, dict[str, Any]]]:
    """Destructive calls without confirm: isError with the confirmed call as next step."""
    for tool, arguments in {
        "cancel_training_job": {"job_name": "j1", "kubernetes": {"context": "c"}},
        "delete_training_job": {"job_name": "j1", "kubernetes": {"namespace": "ml"}},
        "cancel_operation": {"operation_id": "build_image-20261124-070000-abcdef"},
    }.items():
        result = _call(tool, arguments)
        error = json.loads(result.content[0].text)["error"]
        assert result.is_error and error["code"] == "confirmation_required", error
        assert error["hint"] and error["next_step"]["arguments"]["confirm"] is True
        yield f"{tool} without confirm", error["next_step"]


PRODUCERS: dict[str, Callable[[Any], Iterator[tuple[str, dict[str, Any]]]]] = {}


def producer(*tools: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for name in tools:
            PRODUCERS[name] = fn
        return fn

    return register


@producer("build_image")
def _build(_tmp: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    yield "built image", _nested(push_step("fsdp-eks-trainer:0a1b2c3", "fsdp-eks-trainer"))
    yield (
        "built image on a registry host",
        _nested(push_step("localhost:5000/team/trainer:v1", "localhost:5000/team/trainer")),
    )
    yield "build running", _running_operation("build_image")


@producer("transfer_job_artifacts")
def _transfer(_tmp: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    push = {"action": "push_to_hub", "repo_id": "org/m", "source": "s3://bucket-b/runs/j/export"}
    refused = _call("transfer_job_artifacts", push)
    step = _sent_step(refused)
    assert step is not None and step["arguments"]["action"] == "fetch", refused.content[0].text
    yield "push_to_hub of an s3:// export", step
    yield "transfer running", _running_operation("transfer_job_artifacts")


@producer("push_to_ecr")
def _push(_tmp: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    uri = "123456789012.dkr.ecr.us-east-1.amazonaws.com/team/trainer:v1"
    step = _nested(deploy_step(uri, "team/trainer"))
    assert step["arguments"]["kubernetes"]["image_uri"] == uri
    yield "pushed image", step
    yield (
        "tag exists",
        _confirm_step(
            "push_to_ecr", {"image": "t:1", "repository": "team/trainer", "region": "us-east-1"}
        ),
    )


@producer("deploy_training_job")
def _deploy(tmp: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    yield from _deploy_steps(tmp)


@producer("get_training_job", "cancel_training_job", "delete_training_job")
def _jobs(tmp: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    yield from _job_steps(tmp)


@producer("cancel_operation", "get_operation")
def _operations(_tmp: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    yield from _refusals()
    yield "running operation", _running_operation("push_to_ecr")


@producer("start_codebuild", "get_codebuild_build")
def _codebuild(_tmp: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    for status, complete in (("IN_PROGRESS", False), ("FAILED", True)):
        step = builds._next_step({"id": "p:1f2e", "buildStatus": status}, "us-east-1", complete)
        assert step is not None
        yield f"codebuild {status}", _nested(step)


@producer("setup_codebuild")
def _setup(_tmp: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    pytest.importorskip("moto")  # the moto_server fixture is taken by the test below
    args = {"project_name": "ns-cb", "region": "us-east-1", "ecr_repository": "ns-cb-repo",
            "source_url": "https://github.com/acme/trainer"}  # fmt: skip
    for dry_run in (True, False):
        result = _call("setup_codebuild", {**args, "dry_run": dry_run})
        assert not result.is_error, result.content[0].text
        step = _sent_step(result)
        assert step is not None
        assert step["tool"] == ("setup_codebuild" if dry_run else "start_codebuild")
        yield f"setup_codebuild dry_run={dry_run}", step


@producer("manage_eks_cluster", "inspect_eks_cluster")
def _cluster(_tmp: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    yield from CLUSTER_STEPS
    access = EksClusterAccess(cluster_name="c1", region="us-east-1")
    storage = StorageSpec(fsx_size_gib=2400, nodegroup="gpu", bucket="team-data")
    cleanup = CleanupSpec(only=["fsx"], delete_bucket="if_empty")
    for source, arguments in (
        ("storage plan", actions._storage_args(access, storage.placed("c1", "default", None))),
        ("cleanup plan", actions._cleanup_args(access, cleanup)),
    ):
        yield (
            source,
            _nested(NextStep(tool="manage_eks_cluster", arguments={**arguments, "confirm": True})),
        )


@producer("deploy_model_server", "get_model_server", "list_model_servers", "delete_model_server")
def _servers(tmp: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    kubeconfig = str(tmp / "kubeconfig")
    planned = _call("deploy_model_server", {
        "name": "demo", "model": "s3://demo-bucket/runs/demo/export", "dry_run": True,
        "target": "kubernetes",
        "kubernetes": {"kubeconfig": kubeconfig, "instance_type": "g5.48xlarge", "replicas": 2},
    })  # fmt: skip
    assert not planned.is_error, planned.content[0].text
    step = _sent_step(planned)
    assert step is not None and step["tool"] == "deploy_model_server"
    assert planned.structured_content["cost"]["usd_per_hour"] > 0
    yield "model server dry run", step
    settings = KubernetesServerAccess(kubeconfig=kubeconfig, namespace="serving")
    yield (
        "kubernetes server starting",
        _nested(
            NextStep(tool="get_model_server", arguments={"name": "demo", **server_access(settings)})
        ),
    )
    missing = _call("get_model_server", {"name": "nobody", "target": "local"})
    assert missing.is_error
    yield "local server not found", _sent_step(missing)
    yield (
        "local server conflict or ended",
        _nested(NextStep(tool="delete_model_server", arguments={"name": "demo", "confirm": True})),
    )


CLUSTER_STEPS: list[tuple[str, dict[str, Any]]] = []


def test_every_next_step_of_every_tool_is_a_call_its_schema_takes(tmp_path, moto_server, kube_api):
    kube_api.reset()  # no Training Operator, no device plugin: validate plans fixes
    kubeconfig = str(kube_api.kubeconfig)
    for tool in ("inspect_eks_cluster", "manage_eks_cluster"):
        result = _call(tool, {"action": "validate", "kubeconfig": kubeconfig})
        assert not result.is_error, result.content[0].text
        step = _sent_step(result)
        assert step is not None and step["arguments"]["action"] == "auto_fix"
        CLUSTER_STEPS.append((f"{tool} validate", step))
    planned = _call("manage_eks_cluster", step["arguments"])
    step = _sent_step(planned)
    assert step is not None and step["arguments"]["confirm"] is True
    CLUSTER_STEPS.append(("auto_fix plan", step))

    names = {spec.name for spec in all_tools()}
    unlisted = names - set(PRODUCERS) - NO_NEXT_STEP
    assert not unlisted, f"list the next steps of {sorted(unlisted)} here"
    checked = 0
    for tool in sorted(names - NO_NEXT_STEP):
        for source, step in PRODUCERS[tool](tmp_path):
            _check(step, f"{tool}: {source}")
            checked += 1
    assert checked >= 30


def test_a_step_with_an_unknown_or_missing_argument_is_caught():
    """The check itself can fail: the old string-era steps would not pass."""
    with pytest.raises(AssertionError, match="region"):
        _check({"tool": "start_codebuild", "arguments": {"project_name": "p"}}, "old")
    with pytest.raises(AssertionError, match="cluster_name"):
        _check({"tool": "get_training_job", "arguments": {"job_name": "j",
                "cluster_name": "flat"}}, "unnested")  # fmt: skip
