"""Bring an account to the desired pipeline: read each resource, compare, write only the
difference (or, on a dry run, record the writes it would make)."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from typing import Any

from skills.cloud.clients import aws_session
from skills.cloud.ecr_repository import ensure_repository
from skills.codebuild_pipeline import plan
from skills.codebuild_pipeline.models import PipelineResult, PlannedCall, ResourceChange
from skills.operations import remembered
from skills.shared.next_step import NextStep
from skills.shared.progress import NullProgress, Progress

STEPS = 5
# The account id in a plan made without credentials (ARNs show where it goes).
ACCOUNT_UNREAD = "<ACCOUNT_ID>"
# IAM is eventually consistent: a role just created may not be assumable by CodeBuild yet.
ROLE_PROPAGATION_TRIES = 10


# What a dry run without AWS credentials answers for each read it would make: the
# account's resources as absent (a new account), so it lists every write there is to
# make; the result says which reads it did not make. (http status, body or error code)
ABSENT: dict[str, tuple[int, Any]] = {
    "GetCallerIdentity": (200, {"Account": ACCOUNT_UNREAD, "Arn": "", "UserId": ""}),
    "DescribeRepositories": (400, "RepositoryNotFoundException"),
    "GetLifecyclePolicy": (400, "LifecyclePolicyNotFoundException"),
    "GetRole": (404, "NoSuchEntity"),
    "GetRolePolicy": (404, "NoSuchEntity"),
    "DescribeLogGroups": (200, {"logGroups": []}),
    "BatchGetProjects": (200, {"projects": []}),
}


def has_credentials(session: Any) -> bool:
    """Whether boto3's chain finds AWS credentials (env, files, SSO, instance role)."""
    return session.get_credentials() is not None


def _answer_as_absent(client: Any, unread: list[str]) -> None:
    """Make `client` answer ABSENT's reads itself, without a request (no credentials
    needed), noting each in `unread`; botocore's own before-call event, as its Stubber."""
    from botocore.awsrequest import AWSResponse

    def answer(model: Any, **_: Any) -> tuple[Any, dict[str, Any]] | None:
        if model.name not in ABSENT:
            return None  # not a read of the plan: botocore asks for credentials
        status, body = ABSENT[model.name]
        unread.append(f"{model.service_model.service_name}.{model.name}")
        if status >= 300:
            body = {
                "Error": {"Code": body, "Message": "not read: no AWS credentials"},
                "ResponseMetadata": {"HTTPStatusCode": status},
            }
        return AWSResponse(None, status, {}, None), body

    client.meta.events.register("before-call.*.*", answer)


class Applier:
    def __init__(self, settings: plan.Settings, dry_run: bool, session: Any = None) -> None:
        self.s = settings
        self.dry_run = dry_run
        session = session or aws_session(region=settings.region)
        # A dry run with no credentials still lists its writes: every resource as new.
        self.unread: list[str] | None = [] if dry_run and not has_credentials(session) else None
        self.client = lambda name: self._client(session, name)
        self.ecr, self.iam, self.logs = self.client("ecr"), self.client("iam"), self.client("logs")
        self.codebuild = self.client("codebuild")
        self.calls: list[PlannedCall] = []
        self.resources: list[ResourceChange] = []
        self.role_created = False

    def _client(self, session: Any, name: str) -> Any:
        client = session.client(name, region_name=self.s.region)
        if self.unread is not None:
            _answer_as_absent(client, self.unread)
        return client

    def write(self, service: str, operation: str, fn: Callable[..., Any], **params: Any) -> Any:
        self.calls.append(PlannedCall(service=service, operation=operation, params=params))
        return None if self.dry_run else fn(**params)

    def record(
        self, kind: str, name: str, arn: str | None, existed: bool, changes: list[str]
    ) -> None:
        if not existed:
            action = "would_create" if self.dry_run else "created"
        elif changes:
            action = "would_update" if self.dry_run else "updated"
        else:
            action = "unchanged"
        self.resources.append(
            ResourceChange(kind=kind, name=name, arn=arn, action=action, changes=changes)  # type: ignore[arg-type]
        )

    # --- resources -------------------------------------------------------------------

    def repository(self, arn: str) -> None:
        """push_to_ecr's ensure_repository: scan on push, a lifecycle policy, tag
        mutability left as found; a concurrent create is aligned, not an error."""
        repo = ensure_repository(
            self.ecr,
            self.s.ecr_repository,
            scan_on_push=True,
            immutable_tags=None,
            keep_last=None,
            write=lambda op, fn, **params: self.write("ecr", op, fn, **params),
        )
        created = repo.action == "created"
        if not self.dry_run:  # its builds push there: deploys default to it
            remembered.remember(repo.name, self.s.region, "setup_codebuild")
        self.record(
            "ecr_repository",
            repo.name,
            repo.arn or arn,
            not created,
            [] if created else repo.changes,
        )

    def role(self, account: str) -> None:
        name = plan.role_name(self.s.project_name)
        arn = plan.arns(self.s, account).role
        policy = plan.role_policy(self.s, account)
        trust = json.dumps(plan.TRUST_POLICY)

        def put_policy() -> None:
            self.write(
                "iam",
                "put_role_policy",
                self.iam.put_role_policy,
                RoleName=name,
                PolicyName=plan.POLICY_NAME,
                PolicyDocument=json.dumps(policy),
            )

        try:
            role = self.iam.get_role(RoleName=name)["Role"]
        except self.iam.exceptions.NoSuchEntityException:
            about = f"CodeBuild role of {self.s.project_name} (fsdp-eks)"
            self.write(
                "iam",
                "create_role",
                self.iam.create_role,
                RoleName=name,
                AssumeRolePolicyDocument=trust,
                Description=about,
            )
            put_policy()
            self.role_created = True
            return self.record("iam_role", name, arn, False, [])
        changes = []
        if plan.normalized_policy(role["AssumeRolePolicyDocument"]) != plan.normalized_policy(
            plan.TRUST_POLICY
        ):
            changes.append("AssumeRolePolicyDocument")
            self.write(
                "iam",
                "update_assume_role_policy",
                self.iam.update_assume_role_policy,
                RoleName=name,
                PolicyDocument=trust,
            )
        try:
            current = self.iam.get_role_policy(RoleName=name, PolicyName=plan.POLICY_NAME)
            same = plan.normalized_policy(current["PolicyDocument"]) == plan.normalized_policy(
                policy
            )
        except self.iam.exceptions.NoSuchEntityException:
            same = False
        if not same:
            changes.append(f"inline policy {plan.POLICY_NAME}")
            put_policy()
        self.record("iam_role", name, role["Arn"], True, changes)

    def log_group(self, arn: str) -> None:
        name = plan.log_group_name(self.s.project_name)
        days = self.s.log_retention_days
        groups = self.logs.describe_log_groups(logGroupNamePrefix=name).get("logGroups", [])
        group = next((g for g in groups if g["logGroupName"] == name), None)
        if group is None:
            self.write("logs", "create_log_group", self.logs.create_log_group, logGroupName=name)
        if group is None or group.get("retentionInDays") != days:
            self.write(
                "logs",
                "put_retention_policy",
                self.logs.put_retention_policy,
                logGroupName=name,
                retentionInDays=days,
            )
        changes = (
            [] if group is None or group.get("retentionInDays") == days else ["retentionInDays"]
        )
        self.record("log_group", name, arn, group is not None, changes)

    def project(self, account: str) -> dict[str, Any] | None:
        desired = plan.project_params(self.s, account)
        found = self.codebuild.batch_get_projects(names=[self.s.project_name]).get("projects", [])
        current = found[0] if found else None
        if current is None:
            self._create_project(desired)
            self.record("codebuild_project", self.s.project_name, None, False, [])
            return None
        changes = plan.project_differences(current, desired)
        if changes:
            self.write("codebuild", "update_project", self.codebuild.update_project, **desired)
        self.record("codebuild_project", self.s.project_name, current.get("arn"), True, changes)
        return current

    def _create_project(self, desired: dict[str, Any]) -> None:
        for attempt in range(ROLE_PROPAGATION_TRIES):
            try:
                self.write("codebuild", "create_project", self.codebuild.create_project, **desired)
                return
            except self.codebuild.exceptions.InvalidInputException as exc:
                young_role = self.role_created and "sts:AssumeRole" in str(exc)
                if not young_role or attempt == ROLE_PROPAGATION_TRIES - 1:
                    raise
                self.calls.pop()
                time.sleep(3)

    def webhook(self, current: dict[str, Any] | None) -> None:
        desired = plan.webhook_params(self.s)
        hook = (current or {}).get("webhook")
        if not hook:
            self.write("codebuild", "create_webhook", self.codebuild.create_webhook, **desired)
            return self.record("webhook", self.s.project_name, None, False, [])
        have = [sorted((f["type"], f["pattern"]) for f in g) for g in hook.get("filterGroups", [])]
        want = [sorted((f["type"], f["pattern"]) for f in g) for g in desired["filterGroups"]]
        changes = [] if sorted(have) == sorted(want) else ["filterGroups"]
        if changes:
            self.write("codebuild", "update_webhook", self.codebuild.update_webhook, **desired)
        self.record("webhook", self.s.project_name, None, True, changes)


def apply(
    settings: plan.Settings,
    dry_run: bool,
    progress: Progress | None = None,
    session: Any = None,
    settings_notes: tuple[str, ...] = (),
) -> PipelineResult:
    """The pipeline brought to `settings` (a dry run: its writes listed); settings_notes:
    what the caller decided for the user (a default taken), said in the result."""
    progress = progress or NullProgress()
    source = plan.parse_source(settings.source_url)
    applier = Applier(settings, dry_run, session)
    account = applier.client("sts").get_caller_identity()["Account"]
    arns = plan.arns(settings, account)
    progress.report(0, STEPS, f"ECR repository {settings.ecr_repository}")
    applier.repository(arns.repository)
    progress.report(1, STEPS, "IAM service role")
    applier.role(account)
    progress.report(2, STEPS, "log group")
    applier.log_group(arns.log_group)
    progress.report(3, STEPS, f"CodeBuild project {settings.project_name}")
    current = applier.project(account)
    if settings.webhook:
        progress.report(4, STEPS, "webhook")
        applier.webhook(current)
    progress.report(STEPS, STEPS, "done")
    actions = {r.action for r in applier.resources}
    if dry_run:
        status = "planned"
    elif actions == {"unchanged"}:
        status = "unchanged"
    else:
        status = "created" if "created" in actions else "updated"
    notes = list(settings_notes)
    if applier.unread is not None:
        notes.append(
            "no AWS credentials: nothing was read, so every resource is listed as new in "
            f"account {ACCOUNT_UNREAD}; with credentials the same dry run reads "
            + ", ".join(dict.fromkeys(applier.unread))
        )
    return PipelineResult(
        status=status,
        notes=notes,
        dry_run=dry_run,
        project_name=settings.project_name,
        region=settings.region,
        source_type=source.type,
        resources=applier.resources,
        calls=applier.calls,
        next_step=_next_step(settings, dry_run),
    )


def _next_step(settings: plan.Settings, dry_run: bool) -> NextStep:
    """A dry run's: the same call, applied; an applied pipeline's: its first build."""
    if dry_run:
        return NextStep(
            tool="setup_codebuild", arguments=dataclasses.asdict(settings), why="apply this plan"
        )
    return NextStep(
        tool="start_codebuild",
        arguments={"project_name": settings.project_name, "region": settings.region},
        why="start a build",
    )
