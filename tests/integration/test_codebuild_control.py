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
                "source_url": "s3://b/k.zip"})  # fmt: skip
            preview = await client.call_tool("setup_codebuild", {
                "project_name": "cb-nocred", "region": "us-east-1", "ecr_repository": "r1",
                "source_url": "s3://b/k.zip", "dry_run": True})  # fmt: skip
            return bad, nocred, preview

    bad, nocred, preview = anyio.run(calls)
    for result, code in ((bad, "invalid_input"), (nocred, "no_credentials")):
        assert result.is_error
        text = result.content[0].text
        assert json.loads(text)["error"]["code"] == code and "Traceback" not in text
    # A dry run previews the writes without credentials, saying which reads it did not make.
    assert not preview.is_error, preview.content[0].text
    planned = preview.structured_content
    assert planned["status"] == "planned" and {r["action"] for r in planned["resources"]} == {
        "would_create"
    }
    assert any("no AWS credentials" in note for note in planned["notes"])


# --- secrets: masked on the way out, never sent as plain text (issue 20 items 4, 13) ----

PLANTED = {
    "hf": "hf_" + "Qw3" * 12,
    "key_id": "AKIAZ7XQ2WEXAMPLE4KD",
    "ini_secret": "Zm9vYmFyYmF6cXV4cXV1eGNvcmdlZ3JhdWx0Z2FycA",
    "own_secret": "server-own-aws-secret-value-0123456789",
    "github": "ghp_" + "Ab1" * 12,
    "wandb": "0123456789abcdef0123456789abcdef01234567",
}


def _planted_lines() -> list[str]:
    return [
        f"Downloading with token {PLANTED['hf']}",
        f"aws_access_key_id = {PLANTED['key_id']}",
        f"aws_secret_access_key = {PLANTED['ini_secret']}",
        f"echo {PLANTED['own_secret']}",
        f"git clone https://x-access-token:{PLANTED['github']}@github.com/acme/trainer",
        f"WANDB_API_KEY={PLANTED['wandb']} wandb login",
    ]


def _write_log(build_id: str, lines: list[str]) -> None:
    logs = boto3.client("logs")
    group, stream = "/aws/codebuild/cb-ctl", build_id.rpartition(":")[2]
    logs.create_log_stream(logGroupName=group, logStreamName=stream)
    now_ms = int(time.time() * 1000)
    events = [{"timestamp": now_ms + i, "message": line + "\n"} for i, line in enumerate(lines)]
    logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=events)


def test_a_log_tail_comes_back_masked(project, monkeypatch):
    """Issue 20 item 4: get_codebuild_build (read-only) returned an HF token, an AWS key
    id, `aws_secret_access_key = ...` and the server's own AWS secret verbatim."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", PLANTED["own_secret"])  # moto takes any
    build_id = boto3.client("codebuild").start_build(projectName=project)["build"]["id"]
    _write_log(build_id, _planted_lines())
    build = get_codebuild_build(build_id=build_id, region="us-east-1", log_lines=20)
    text = "\n".join(build.log_tail)
    assert len(build.log_tail) == 6 and "wandb login" in text and "github.com/acme" in text
    for name, value in PLANTED.items():
        assert value not in text, name
        assert value not in build.model_dump_json(), name
    status, out, err = cli("get_codebuild_build", "--build_id", build_id, "--region",
                           "us-east-1", "--log_lines", "20", "--json")  # fmt: skip
    assert status == 0 and not [v for v in PLANTED.values() if v in out + err]


@pytest.mark.parametrize("name", ["GITHUB_TOKEN", "WANDB_API_KEY", "NPM_TOKEN", "DB_PASSWORD",
                                  "MY_SECRET_VALUE", "SIGNING_KEY"])  # fmt: skip
def test_a_secret_named_env_key_with_a_plain_value_is_refused(project, name):
    """Issue 20 item 13: `--env GITHUB_TOKEN=ghp_...` went as a PLAINTEXT override."""
    status, out, err = cli("start_codebuild", "--project_name", project, "--region",
                           "us-east-1", "--env", f"{name}=plain-value-1", "--json")  # fmt: skip
    assert status == 2 and "Traceback" not in out + err
    error = json.loads(out or err)["error"]
    assert error["code"] == "invalid_input" and "plain-value-1" not in out + err
    assert "PARAMETER_STORE" in error["hint"] and "SECRETS_MANAGER" in error["hint"]
    assert f"--env {name}" in error["hint"] and "ssm:/" in error["hint"]


def test_secret_references_are_sent_with_their_codebuild_types(project, monkeypatch):
    from skills.codebuild_pipeline import builds

    sent: list[dict] = []
    real = builds._clients

    def recording(region):
        codebuild, logs = real(region)
        codebuild.meta.events.register(
            "provide-client-params.codebuild.StartBuild",
            lambda params, **_: sent.append(params),
        )
        return codebuild, logs

    monkeypatch.setattr(builds, "_clients", recording)
    arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:wandb-AbCdEf"
    build = start_codebuild(project_name=project, region="us-east-1", env={
        "GITHUB_TOKEN": "ssm:/ci/github-token", "WANDB_API_KEY": f"secretsmanager:{arn}",
        "TEST_LEVEL": "full"})  # fmt: skip
    assert build.status == "SUCCEEDED"
    assert sent[0]["environmentVariablesOverride"] == [
        {"name": "GITHUB_TOKEN", "value": "/ci/github-token", "type": "PARAMETER_STORE"},
        {"name": "TEST_LEVEL", "value": "full", "type": "PLAINTEXT"},
        {"name": "WANDB_API_KEY", "value": arn, "type": "SECRETS_MANAGER"},
    ]
