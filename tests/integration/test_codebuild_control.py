"""start_codebuild / get_codebuild_build against moto (moto jumps to SUCCEEDED on the
first poll), the log tail from a stream the test writes, and bad input as typed errors
over the CLI and MCP."""

from __future__ import annotations

import json
import time

import anyio
import boto3
import pytest
from mcp import Client

from commands.get_codebuild_build import get_codebuild_build
from commands.setup_codebuild import setup_codebuild
from commands.start_codebuild import start_codebuild
from mcp_server.server import build_server
from skills.shared.progress import CollectingProgress
from tests.integration.test_job_hardening import cli

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def project(moto_server):
    setup_codebuild(project_name="cb-ctl", region="us-east-1", ecr_repository="cb-ctl-repo",
                    source_url="https://github.com/acme/trainer")  # fmt: skip
    return "cb-ctl"


def test_start_follows_to_the_end(project):
    progress = CollectingProgress()
    build = start_codebuild(project_name=project, region="us-east-1",
                            env={"TEST_LEVEL": "full"}, progress=progress)  # fmt: skip
    assert build.status == "SUCCEEDED" and build.complete and build.next_step is None
    assert build.log_group == "/aws/codebuild/cb-ctl"
    assert build.log_stream == build.build_id.rpartition(":")[2]
    assert any(p.name == "BUILD" and p.status == "SUCCEEDED" for p in build.phases)
    assert any("started" in e.message for e in progress.events)


def test_status_and_log_tail(project):
    build_id = boto3.client("codebuild").start_build(projectName=project)["build"]["id"]
    logs = boto3.client("logs")
    group, stream = "/aws/codebuild/cb-ctl", build_id.rpartition(":")[2]
    logs.create_log_stream(logGroupName=group, logStreamName=stream)
    now_ms = int(time.time() * 1000)
    events = [{"timestamp": now_ms + i, "message": f"line {i}\n"} for i in range(5)]
    logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events)
    build = get_codebuild_build(build_id=build_id, region="us-east-1", log_lines=3)
    assert build.status == "SUCCEEDED"
    assert build.log_tail == ["line 2", "line 3", "line 4"]
    assert {p.name: p.duration_s is not None for p in build.phases}["BUILD"]


def test_unknown_build_is_not_found(project):
    status, out, _ = cli("get_codebuild_build", "--build_id", "cb-ctl:00000000-0000",
                         "--region", "us-east-1", "--json")  # fmt: skip
    assert status == 2 and json.loads(out)["error"]["code"] == "not_found"


BAD = [
    (["--project_name", "-bad name", "--region", "us-east-1"], "invalid_input"),
    (["--project_name", "cb-ctl", "--region", "xx-nowhere-9"], "invalid_input"),
]


@pytest.mark.parametrize(("argv", "code"), BAD)
def test_bad_input_is_typed_over_the_cli(project, argv, code):
    status, out, err = cli("start_codebuild", *argv, "--json")
    error = json.loads(out)["error"]
    assert status == 2 and error["code"] == code and error["hint"]
    assert "Traceback" not in out + err


def _no_credentials(monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    for name in ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
        (tmp_path / name).write_text("")
        monkeypatch.setenv(name, str(tmp_path / name))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def test_no_credentials_is_typed_over_the_cli(project, monkeypatch, tmp_path):
    _no_credentials(monkeypatch, tmp_path)
    status, out, err = cli("setup_codebuild", "--project_name", "cb-nocred", "--region",
                           "us-east-1", "--ecr_repository", "r1", "--source_url",
                           "https://github.com/acme/trainer", "--json")  # fmt: skip
    error = json.loads(out)["error"]
    assert status == 1 and error["code"] == "no_credentials" and error["hint"]
    assert "Traceback" not in out + err


def test_bad_input_and_no_credentials_over_mcp(project, monkeypatch, tmp_path):
    async def calls():
        async with Client(build_server()) as client:
            bad = await client.call_tool("get_codebuild_build", {
                "build_id": "cb-ctl:0000", "region": "mars-1"})  # fmt: skip
            _no_credentials(monkeypatch, tmp_path)
            nocred = await client.call_tool("setup_codebuild", {
                "project_name": "cb-nocred", "region": "us-east-1", "ecr_repository": "r1",
                "source_url": "s3://b/k.zip", "dry_run": True})  # fmt: skip
            return bad, nocred

    bad, nocred = anyio.run(calls)
    for result, code in ((bad, "invalid_input"), (nocred, "no_credentials")):
        assert result.is_error
        text = result.content[0].text
        assert json.loads(text)["error"]["code"] == code and "Traceback" not in text
