"""The desired state of a CodeBuild pipeline: pure functions of the inputs and the account."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlparse

from skills.shared.errors import ErrorCode, ToolFailure

POLICY_NAME = "fsdp-eks-codebuild"
TRUST_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "codebuild.amazonaws.com"},
            "Action": "sts:AssumeRole",
        }
    ],
}
ECR_PUSH_PULL = sorted(
    [
        "ecr:BatchCheckLayerAvailability",
        "ecr:BatchGetImage",
        "ecr:CompleteLayerUpload",
        "ecr:DescribeImages",
        "ecr:DescribeRepositories",
        "ecr:GetDownloadUrlForLayer",
        "ecr:InitiateLayerUpload",
        "ecr:PutImage",
        "ecr:UploadLayerPart",
    ]
)
_CODECOMMIT = re.compile(r"^https://git-codecommit\.([a-z0-9-]+)\.amazonaws\.com/v1/repos/[\w.-]+$")
_GITHUB = re.compile(r"^https://github\.com/[\w.-]+/[\w.-]+?(\.git)?/?$")


TestLevel = Literal["quick", "standard", "full"]
TagStrategy = Literal["auto", "semantic", "git-sha", "latest"]
# The retention values CloudWatch Logs accepts.
LogRetention = Literal[
    1,
    3,
    5,
    7,
    14,
    30,
    60,
    90,
    120,
    150,
    180,
    365,
    400,
    545,
    731,
    1096,
    1827,
    2192,
    2557,
    2922,
    3288,
    3653,
]


@dataclass(frozen=True)
class Settings:
    project_name: str
    region: str
    ecr_repository: str
    source_url: str
    # The one home of setup_codebuild's defaults (the command's signature reads them).
    branch: str = "main"
    webhook: bool = False
    compute_type: str = "BUILD_GENERAL1_MEDIUM"
    image: str = "aws/codebuild/standard:7.0"
    log_retention_days: LogRetention = 30
    test_level: TestLevel = "standard"
    tag_strategy: TagStrategy = "auto"


@dataclass(frozen=True)
class Source:
    type: str  # GITHUB | CODECOMMIT | S3
    location: str
    bucket: str | None = None
    key: str | None = None


# A git remote in ssh form, as `git clone git@github.com:OWNER/REPO.git` leaves it.
_SSH_REMOTE = re.compile(r"^(?:ssh://)?git@(github\.com)[:/]([^/\s]+/[^/\s]+?)(?:\.git)?/?$")
_CODECOMMIT_SSH = re.compile(
    r"^ssh://(?:[^@/]+@)?git-codecommit\.([a-z0-9-]+)\.amazonaws\.com/v1/repos/([^/\s]+)$"
)


def remote_as_source_url(remote: str) -> str:
    """A git remote URL as the https source CodeBuild takes (ssh forms rewritten)."""
    remote = remote.strip()
    if match := _SSH_REMOTE.match(remote):
        return f"https://{match[1]}/{match[2]}"
    if match := _CODECOMMIT_SSH.match(remote):
        return f"https://git-codecommit.{match[1]}.amazonaws.com/v1/repos/{match[2]}"
    if remote.startswith("https://") and "@" in remote.split("/", 3)[2]:  # user:token@host
        scheme_host = remote.split("/", 3)
        scheme_host[2] = scheme_host[2].rsplit("@", 1)[1]
        return "/".join(scheme_host)
    return remote


def parse_source(url: str) -> Source:
    if url.startswith("s3://"):
        parsed = urlparse(url)
        key = parsed.path.lstrip("/")
        if parsed.netloc and key:
            return Source("S3", f"{parsed.netloc}/{key}", parsed.netloc, key)
    elif _GITHUB.match(url):
        return Source("GITHUB", url)
    elif _CODECOMMIT.match(url):
        return Source("CODECOMMIT", url)
    raise ToolFailure(
        ErrorCode.INVALID_INPUT,
        "source_url is not a GitHub, CodeCommit or S3 source.",
        "Use https://github.com/OWNER/REPO, "
        "https://git-codecommit.REGION.amazonaws.com/v1/repos/NAME or s3://BUCKET/KEY.zip.",
        {"problems": [{"field": "source_url", "problem": "unsupported source"}]},
    )


def partition(region: str) -> str:
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def role_name(project: str) -> str:
    name = f"codebuild-{project}-role"
    if len(name) <= 64:
        return name
    return f"codebuild-{project[:40]}-{hashlib.sha256(project.encode()).hexdigest()[:8]}"


def log_group_name(project: str) -> str:
    return f"/aws/codebuild/{project}"


@dataclass(frozen=True)
class Arns:
    repository: str
    log_group: str
    role: str


def arns(s: Settings, account: str) -> Arns:
    p = partition(s.region)
    return Arns(
        repository=f"arn:{p}:ecr:{s.region}:{account}:repository/{s.ecr_repository}",
        log_group=f"arn:{p}:logs:{s.region}:{account}:log-group:{log_group_name(s.project_name)}",
        role=f"arn:{p}:iam::{account}:role/{role_name(s.project_name)}",
    )


def role_policy(s: Settings, account: str) -> dict[str, Any]:
    """The one inline policy: least privilege for this repository, group and source."""
    a = arns(s, account)
    statements: list[dict[str, Any]] = [
        # AWS requires "*" for this one: it is not scoped to a repository.
        {
            "Sid": "EcrAuth",
            "Effect": "Allow",
            "Action": ["ecr:GetAuthorizationToken"],
            "Resource": "*",
        },
        {
            "Sid": "EcrPushPull",
            "Effect": "Allow",
            "Action": ECR_PUSH_PULL,
            "Resource": a.repository,
        },
        {
            "Sid": "Logs",
            "Effect": "Allow",
            "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
            "Resource": [a.log_group, f"{a.log_group}:log-stream:*"],
        },
    ]
    source = parse_source(s.source_url)
    if source.type == "S3":
        bucket = f"arn:{partition(s.region)}:s3:::{source.bucket}"
        statements += [
            {
                "Sid": "SourceObject",
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:GetObjectVersion"],
                "Resource": f"{bucket}/{source.key}",
            },
            {
                "Sid": "SourceBucket",
                "Effect": "Allow",
                "Action": ["s3:GetBucketLocation", "s3:ListBucket"],
                "Resource": bucket,
            },
        ]
    return {"Version": "2012-10-17", "Statement": statements}


def env_vars(s: Settings) -> list[dict[str, str]]:
    values = {
        "ECR_REPOSITORY": s.ecr_repository,
        "PROJECT_NAME": s.project_name,
        "TAG_STRATEGY": s.tag_strategy,
        "TEST_LEVEL": s.test_level,
    }
    return [{"name": k, "value": v, "type": "PLAINTEXT"} for k, v in sorted(values.items())]


def project_params(s: Settings, account: str) -> dict[str, Any]:
    """create_project / update_project parameters."""
    source = parse_source(s.source_url)
    params: dict[str, Any] = {
        "name": s.project_name,
        "source": {"type": source.type, "location": source.location, "buildspec": "buildspec.yml"},
        "artifacts": {"type": "NO_ARTIFACTS"},
        "environment": {
            "type": "LINUX_CONTAINER",
            "image": s.image,
            "computeType": s.compute_type,
            "privilegedMode": True,  # docker build inside the build
            "environmentVariables": env_vars(s),
        },
        "serviceRole": arns(s, account).role,
        "cache": {"type": "LOCAL", "modes": ["LOCAL_DOCKER_LAYER_CACHE", "LOCAL_SOURCE_CACHE"]},
        "logsConfig": {
            "cloudWatchLogs": {"status": "ENABLED", "groupName": log_group_name(s.project_name)}
        },
    }
    if source.type != "S3":
        params["sourceVersion"] = f"refs/heads/{s.branch}"
    return params


def webhook_params(s: Settings) -> dict[str, Any]:
    return {
        "projectName": s.project_name,
        "filterGroups": [
            [
                {"type": "EVENT", "pattern": "PUSH"},
                {"type": "HEAD_REF", "pattern": f"^refs/heads/{re.escape(s.branch)}$"},
            ]
        ],
    }


# --- comparing what is with what should be -------------------------------------------


def normalized_policy(doc: Any) -> Any:
    """A policy document in one canonical form: strings parsed, single values as lists,
    lists sorted, statements sorted."""
    if isinstance(doc, str):
        doc = json.loads(doc)

    def norm(value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: norm(v, k) for k, v in sorted(value.items())}
        if isinstance(value, list):
            items = [norm(v) for v in value]
            return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
        if key in ("Action", "Resource", "NotAction", "NotResource"):
            return [value]
        return value

    return norm(doc)


def project_differences(current: dict[str, Any], desired: dict[str, Any]) -> list[str]:
    """The names of the settings that differ between a project and the desired params."""
    cur_env, des_env = current.get("environment", {}), desired["environment"]
    cur_src, des_src = current.get("source", {}), desired["source"]
    cur_cache, des_cache = current.get("cache", {}), desired["cache"]
    cur_logs = current.get("logsConfig", {}).get("cloudWatchLogs", {})
    des_logs = desired["logsConfig"]["cloudWatchLogs"]

    def envs(items: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
        return sorted((e["name"], e.get("value", ""), e.get("type", "PLAINTEXT")) for e in items)

    checks = {
        "source.type": (cur_src.get("type"), des_src["type"]),
        "source.location": (cur_src.get("location"), des_src["location"]),
        "source.buildspec": (cur_src.get("buildspec"), des_src["buildspec"]),
        "sourceVersion": (current.get("sourceVersion"), desired.get("sourceVersion")),
        "environment.type": (cur_env.get("type"), des_env["type"]),
        "environment.image": (cur_env.get("image"), des_env["image"]),
        "environment.computeType": (cur_env.get("computeType"), des_env["computeType"]),
        "environment.privilegedMode": (bool(cur_env.get("privilegedMode")), True),
        "environment.environmentVariables": (
            envs(cur_env.get("environmentVariables", [])),
            envs(des_env["environmentVariables"]),
        ),
        "serviceRole": (current.get("serviceRole"), desired["serviceRole"]),
        "cache": (
            (cur_cache.get("type"), sorted(cur_cache.get("modes", []))),
            (des_cache["type"], sorted(des_cache["modes"])),
        ),
        "logsConfig": (
            (cur_logs.get("status"), cur_logs.get("groupName")),
            (des_logs["status"], des_logs["groupName"]),
        ),
    }
    return [name for name, (have, want) in checks.items() if have != want]
