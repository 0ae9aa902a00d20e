"""One truth per result (issue 21): an operation's status is its result's (a build that
failed is a failed operation), a failed call is isError=true with code, hint and next
step, and the next steps chain build -> push -> deploy. Driven through the MCP server
on the local stack: podman builds, the registry and moto take the push, torchrun runs
the job on CPU."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from mcp import Client

from mcp_server import build_server
from skills.operations import operations
from skills.operations.operation_state import outcome
from skills.shared.tooling import spec_of
from skills.training_job_deployer.job_spec import JobSpec
from skills.training_job_deployer.targets.by_name import DeployResult
from skills.training_job_deployer.targets.local.target import LocalSettings, LocalTarget
from tests.integration.test_build_image import _project, hub  # noqa: F401 - a fixture
from tests.integration.test_push_to_ecr import image  # noqa: F401 - a fixture
from tests.sample_tools import judge

pytestmark = pytest.mark.integration


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FSDP_EKS_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def _calls(*calls: tuple[str, dict[str, Any]]) -> list[Any]:
    async def scenario():
        async with Client(build_server()) as client:
            return [await client.call_tool(name, arguments) for name, arguments in calls]

    return anyio.run(scenario)


def _error(result: Any) -> dict[str, Any]:
    assert result.is_error, result.content[0].text
    error = json.loads(result.content[0].text)["error"]
    assert error["code"] and error["message"] and error["hint"], error
    return error


def test_an_operation_whose_result_failed_is_failed_and_an_error_over_mcp(state_dir):
    state = operations.call(spec_of(judge), {"verdict": "bad", "wait_seconds": 30})
    assert state.status == "failed" and state.result.verdict == "bad"
    assert state.error["code"] == "service_error" and state.error["next_step"]
    assert state.next_step.tool == "judge" and state.next_step.arguments == {"verdict": "good"}
    good = operations.call(spec_of(judge), {"verdict": "good", "wait_seconds": 30})
    assert (good.status, good.error, good.next_step) == ("succeeded", None, None)

    async def over_mcp():
        async with Client(build_server(specs=[spec_of(judge)])) as client:
            return await client.call_tool("judge", {"verdict": "bad", "wait_seconds": 30})

    result = anyio.run(over_mcp)
    error = _error(result)
    assert error["code"] == "service_error"
    assert error["next_step"] == {"tool": "judge", "arguments": {"verdict": "good"},
                                  "why": "judge again"}  # fmt: skip
    assert result.structured_content["status"] == "failed"  # the data rides along
    assert result.structured_content["result"]["verdict"] == "bad"


def test_a_failed_jobs_deploy_result_ends_its_operation_failed(tmp_path):
    """The deploy operation of a failed job (auto_retry's) is failed, not succeeded."""
    target = LocalTarget(LocalSettings(runs_dir=str(tmp_path)))
    plan = target.plan(JobSpec(job_name="f"))
    failed = DeployResult(job_name="f", target="local", status="failed", plan=plan,
                          message="exit 1")  # fmt: skip
    ended = outcome(failed)
    assert ended["status"] == "failed" and ended["error"]["code"] == "job_failed"
    assert ended["result"]["status"] == "failed"
    done = failed.model_copy(update={"status": "succeeded"})
    assert outcome(done)["status"] == "succeeded" and "error" not in outcome(done)


def test_build_push_deploy_chain_by_next_steps_and_failures_are_errors(
    hub,  # noqa: F811 - the fixture
    image,  # noqa: F811 - the fixture
    registry,
    moto_server,
    tmp_path,
    state_dir,
):
    dockerfile = _project(tmp_path)
    (tmp_path / "broken").mkdir()
    broken = _project(tmp_path / "broken", extra="COPY missing.txt /app/missing.txt\n")
    built, failed = _calls(
        ("build_image", {"dockerfile": str(dockerfile), "tag": "chain1", "base_mirror": hub,
                         "wait_seconds": 240}),
        ("build_image", {"dockerfile": str(broken), "tag": "chain2", "base_mirror": hub,
                         "wait_seconds": 240}),
    )  # fmt: skip
    # a build that failed: the operation is failed, the call an error with the build's hint
    error = _error(failed)
    assert error["code"] == "build_failed" and "context" in error["hint"]
    state = failed.structured_content
    assert state["status"] == "failed" and state["result"]["status"] == "failed"

    assert not built.is_error, built.content[0].text
    state = built.structured_content
    assert state["status"] == "succeeded" and state["result"]["status"] == "built"
    push = state["next_step"]
    assert push["tool"] == "push_to_ecr" and push["arguments"]["image"].endswith(":chain1")
    assert "next: push_to_ecr " in built.content[0].text
    assert built.content[0].text.count("next:") == 1

    # Follow the pushes of the pre-built image (podman's API has the tiny test image).
    args = {"image": image, "repository": "truth/chain", "region": "us-east-1",
            "registry_host": registry.host, "wait_seconds": 120}  # fmt: skip
    first, again = _calls(("push_to_ecr", args), ("push_to_ecr", args))
    assert not first.is_error, first.content[0].text
    pushed = first.structured_content["result"]
    deploy = first.structured_content["next_step"]
    assert deploy["tool"] == "deploy_training_job"
    assert deploy["arguments"]["kubernetes"]["image_uri"] == pushed["image_uri"]
    # the tag exists: confirmation_required is a failed call, with the confirmed call next
    error = _error(again)
    assert error["code"] == "confirmation_required"
    given = {k: v for k, v in args.items() if k != "wait_seconds"}
    assert error["next_step"]["arguments"] == {**given, "confirm": True}
    confirmed, planned = _calls(
        (error["next_step"]["tool"], error["next_step"]["arguments"]),
        (deploy["tool"], {**deploy["arguments"], "kubernetes": {
            **deploy["arguments"]["kubernetes"], "kubeconfig": str(tmp_path / "kc")}}),
    )  # fmt: skip
    assert not confirmed.is_error, confirmed.content[0].text
    assert confirmed.structured_content["result"]["overwrote_tag"]
    assert not planned.is_error, planned.content[0].text
    assert planned.structured_content["status"] == "planned"
    submit = planned.structured_content["next_step"]
    assert submit["tool"] == "deploy_training_job" and "dry_run" not in submit["arguments"]
    assert submit["arguments"]["kubernetes"]["image_uri"] == pushed["image_uri"]


def test_a_failed_local_job_is_a_failed_deploy_call_with_its_next_step(tmp_path):
    # A dataset only the trainer finds wrong (the plan refuses what it can see).
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": \n')
    (result,) = _calls(
        # One process: the failure is the subject, not a group of ranks (issue 36).
        ("deploy_training_job", {"job_name": "broken", "dataset": str(broken),
                                 "gpu_per_node": 1, "local": {"runs_dir": str(tmp_path)},
                                 "wait_seconds": 120}),
    )  # fmt: skip
    error = _error(result)
    assert error["code"] == "job_failed" and "not valid JSON" in error["message"], error
    logs = error["next_step"]
    assert logs["tool"] == "get_training_job_logs"
    assert logs["arguments"] == {"job_name": "broken", "target": "local", "tail_lines": 200,
                                 "local": {"runs_dir": str(tmp_path)}}  # fmt: skip
    assert result.structured_content["status"] == "failed"
    assert "plan" not in result.structured_content  # a submitted job's plan: include_plan
    (shown,) = _calls((logs["tool"], logs["arguments"]))
    assert not shown.is_error and "not valid JSON" in shown.content[0].text
    assert "text" not in shown.structured_content  # the log is said once: the text
