"""setup_codebuild against moto: creates, then changes nothing; a changed setting updates
exactly its resource; the role policy is least privilege; dry_run creates nothing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from commands.setup_codebuild import setup_codebuild
from skills.cloud.ecr_repository import DEFAULT_KEEP_LAST, lifecycle_policy
from skills.codebuild_pipeline import plan
from skills.codebuild_pipeline.apply import Applier

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration
GITHUB = "https://github.com/acme/trainer"


def _run(name: str, **kw):
    args = dict(project_name=name, region="us-east-1", ecr_repository=f"{name}-repo",
                source_url=GITHUB)  # fmt: skip
    return setup_codebuild(**{**args, **kw})


def _actions(result):
    return {r.kind: r.action for r in result.resources}


def test_first_run_creates_second_changes_nothing(moto_server):
    first = _run("cb-idem")
    assert first.status == "created"
    assert set(_actions(first).values()) == {"created"}
    project = boto3.client("codebuild").batch_get_projects(names=["cb-idem"])["projects"][0]
    env = project["environment"]
    assert env["privilegedMode"] and env["computeType"] == "BUILD_GENERAL1_MEDIUM"
    assert {e["name"] for e in env["environmentVariables"]} == {
        "PROJECT_NAME", "ECR_REPOSITORY", "TEST_LEVEL", "TAG_STRATEGY"}  # fmt: skip
    assert project["cache"]["modes"] == ["LOCAL_DOCKER_LAYER_CACHE", "LOCAL_SOURCE_CACHE"]
    assert project["logsConfig"]["cloudWatchLogs"]["groupName"] == "/aws/codebuild/cb-idem"
    second = _run("cb-idem")
    assert second.status == "unchanged" and second.calls == []
    assert set(_actions(second).values()) == {"unchanged"}


def test_changed_retention_updates_only_the_log_group(moto_server):
    _run("cb-retention")
    changed = _run("cb-retention", log_retention_days=90)
    assert changed.status == "updated"
    assert _actions(changed) == {
        "ecr_repository": "unchanged",
        "iam_role": "unchanged",
        "log_group": "updated",
        "codebuild_project": "unchanged",
    }
    assert [c.operation for c in changed.calls] == ["put_retention_policy"]
    group = boto3.client("logs").describe_log_groups(
        logGroupNamePrefix="/aws/codebuild/cb-retention")["logGroups"][0]  # fmt: skip
    assert group["retentionInDays"] == 90


def test_changed_compute_type_plans_a_project_update(moto_server):
    # moto has no update_project: the dry run shows the compare and the planned write.
    _run("cb-compute")
    planned = _run("cb-compute", compute_type="BUILD_GENERAL1_LARGE", dry_run=True)
    (project,) = [r for r in planned.resources if r.kind == "codebuild_project"]
    assert project.action == "would_update" and project.changes == ["environment.computeType"]
    assert [c.operation for c in planned.calls] == ["update_project"]
    assert planned.calls[0].params["environment"]["computeType"] == "BUILD_GENERAL1_LARGE"


def test_role_policy_is_least_privilege(moto_server):
    _run("cb-policy", source_url="s3://src-bucket/trainer.zip")
    iam = boto3.client("iam")
    role = iam.get_role(RoleName="codebuild-cb-policy-role")["Role"]
    principal = role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"]
    assert principal == {"Service": "codebuild.amazonaws.com"}
    assert iam.list_role_policies(RoleName="codebuild-cb-policy-role")["PolicyNames"] == [
        plan.POLICY_NAME]  # fmt: skip
    assert iam.list_attached_role_policies(RoleName=role["RoleName"])["AttachedPolicies"] == []
    doc = iam.get_role_policy(RoleName=role["RoleName"], PolicyName=plan.POLICY_NAME)
    grants = {}
    for st in doc["PolicyDocument"]["Statement"]:
        assert st["Effect"] == "Allow"
        resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
        for action in st["Action"]:
            grants.setdefault(action, set()).update(resources)
    repo = "arn:aws:ecr:us-east-1:123456789012:repository/cb-policy-repo"
    group = "arn:aws:logs:us-east-1:123456789012:log-group:/aws/codebuild/cb-policy"
    expected = {"ecr:GetAuthorizationToken": {"*"}}
    expected |= {a: {repo} for a in plan.ECR_PUSH_PULL}
    expected |= {
        a: {group, f"{group}:log-stream:*"} for a in ("logs:CreateLogStream", "logs:PutLogEvents")
    }
    expected |= {
        a: {"arn:aws:s3:::src-bucket/trainer.zip"} for a in ("s3:GetObject", "s3:GetObjectVersion")
    }
    expected |= {a: {"arn:aws:s3:::src-bucket"} for a in ("s3:GetBucketLocation", "s3:ListBucket")}
    assert grants == expected
    assert not any(a.endswith(":*") or a == "*" for a in grants)


def test_dry_run_creates_nothing(moto_server):
    planned = _run("cb-dry", webhook=True, dry_run=True)
    assert planned.status == "planned"
    assert set(_actions(planned).values()) == {"would_create"}
    ops = [c.operation for c in planned.calls]
    # put_lifecycle_policy: the repository is made by ecr_publisher's ensure_repository
    # (setup_codebuild's own copy set none; the shared version decides).
    assert ops == ["create_repository", "put_lifecycle_policy", "create_role", "put_role_policy",
                   "create_log_group", "put_retention_policy", "create_project",
                   "create_webhook"]  # fmt: skip
    policy = json.loads(planned.calls[3].params["PolicyDocument"])
    assert policy["Statement"][0]["Action"] == ["ecr:GetAuthorizationToken"]
    assert "cb-dry" not in boto3.client("codebuild").list_projects()["projects"]
    repos = boto3.client("ecr").describe_repositories()["repositories"]
    assert "cb-dry-repo" not in {r["repositoryName"] for r in repos}
    roles = {r["RoleName"] for r in boto3.client("iam").list_roles()["Roles"]}
    assert "codebuild-cb-dry-role" not in roles
    groups = boto3.client("logs").describe_log_groups(logGroupNamePrefix="/aws/codebuild/cb-dry")
    assert groups["logGroups"] == []


def test_webhook_filters_push_on_the_branch(moto_server):
    # moto does not implement create_webhook (HTTP 500): this call is checked with
    # botocore's Stubber, the rest of the run against moto.
    settings = plan.Settings(project_name="cb-hook", region="us-east-1",
                             ecr_repository="cb-hook-repo", source_url=GITHUB,
                             branch="release", webhook=True)  # fmt: skip
    applier = Applier(settings, dry_run=False)
    expected = {"projectName": "cb-hook", "filterGroups": [[
        {"type": "EVENT", "pattern": "PUSH"},
        {"type": "HEAD_REF", "pattern": "^refs/heads/release$"}]]}  # fmt: skip
    with Stubber(applier.codebuild) as stub:
        stub.add_response("create_webhook", {"webhook": {"url": "https://x"}}, expected)
        applier.webhook(None)
        stub.assert_no_pending_responses()
    assert applier.resources[-1].action == "created"
    existing = {"webhook": {"filterGroups": expected["filterGroups"]}}
    applier.webhook(existing)
    assert applier.resources[-1].action == "unchanged"


def test_repository_gets_the_lifecycle_policy(moto_server):
    _run("cb-life")
    ecr = boto3.client("ecr")
    text = ecr.get_lifecycle_policy(repositoryName="cb-life-repo")["lifecyclePolicyText"]
    assert text == lifecycle_policy(DEFAULT_KEEP_LAST)
    (repo,) = ecr.describe_repositories(repositoryNames=["cb-life-repo"])["repositories"]
    assert repo["imageScanningConfiguration"]["scanOnPush"]


class _LateLook:
    """An ECR client that does not see the repository on its first look, as when
    another setup (or a push) creates it between our describe and our create."""

    def __init__(self, ecr):
        self._ecr, self._looked = ecr, False

    def describe_repositories(self, **params):
        if not self._looked:
            self._looked = True
            raise self._ecr.exceptions.RepositoryNotFoundException(
                {"Error": {"Code": "RepositoryNotFoundException"}}, "DescribeRepositories"
            )
        return self._ecr.describe_repositories(**params)

    def __getattr__(self, name):
        return getattr(self._ecr, name)


def test_repository_created_concurrently_is_aligned_not_an_error(moto_server):
    boto3.client("ecr").create_repository(repositoryName="cb-race-repo")  # the other setup
    settings = plan.Settings(project_name="cb-race", region="us-east-1",
                             ecr_repository="cb-race-repo", source_url=GITHUB)  # fmt: skip
    applier = Applier(settings, dry_run=False)
    applier.ecr = _LateLook(applier.ecr)
    applier.repository("arn:unused")
    (change,) = applier.resources
    assert change.kind == "ecr_repository" and change.action == "updated"
    assert change.arn.endswith(":repository/cb-race-repo")
    ops = [c.operation for c in applier.calls]
    assert ops == ["create_repository", "put_image_scanning_configuration", "put_lifecycle_policy"]
    text = boto3.client("ecr").get_lifecycle_policy(repositoryName="cb-race-repo")
    assert text["lifecyclePolicyText"] == lifecycle_policy(DEFAULT_KEEP_LAST)


def test_the_seed_setup_codebuild_call_plans_from_the_remote(
    moto_server, tmp_path, monkeypatch
) -> None:
    """`setup-codebuild --project-name pytorch-fsdp --region us-west-2 --ecr-repository
    fsdp` (no --source_url) from a git checkout: a plan with the document's defaults."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "remote", "add", "origin",
                    "https://github.com/team/pytorch-fsdp.git"], check=True)  # fmt: skip
    monkeypatch.chdir(tmp_path)
    done = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "setup-codebuild.sh"), "--project-name", "pytorch-fsdp",
         "--region", "us-west-2", "--ecr-repository", "fsdp", "--dry_run", "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["status"] == "planned" and result["source_type"] == "GITHUB"
    text = json.dumps(result)
    assert "https://github.com/team/pytorch-fsdp.git" in text
    assert '"TEST_LEVEL"' in text and "standard" in text
