"""Start a CodeBuild build, read its phases and the tail of its CloudWatch log (secrets
masked as every log is: the build's own output can print tokens)."""

from __future__ import annotations

from typing import Any

from skills.cloud.clients import aws_session
from skills.codebuild_pipeline.env_overrides import environment_overrides
from skills.codebuild_pipeline.models import BuildPhase, CodeBuildBuild
from skills.codebuild_pipeline.plan import log_group_name
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.next_step import NextStep
from skills.shared.progress import NullProgress, Progress
from skills.shared.secrets import redact, secret_values
from skills.shared.waiting import poll_until

POLL_S = 5.0


def _clients(region: str | None) -> tuple[Any, Any]:
    session = aws_session(region=region)
    return session.client("codebuild"), session.client("logs")


def log_location(build: dict[str, Any]) -> tuple[str, str]:
    """(group, stream) from the build's `logs`; CodeBuild's own naming when it has none
    yet: /aws/codebuild/<project> and the build id's UUID."""
    logs = build.get("logs") or {}
    group = logs.get("groupName") or log_group_name(build["projectName"])
    stream = logs.get("streamName") or build["id"].rpartition(":")[2]
    return group, stream


def log_tail(logs: Any, group: str, stream: str, lines: int) -> list[str]:
    try:
        events = logs.get_log_events(
            logGroupName=group, logStreamName=stream, limit=lines, startFromHead=False
        )["events"]
    except logs.exceptions.ResourceNotFoundException:
        return []  # no stream yet: the build has not written anything
    values = secret_values()
    return [redact(e["message"].rstrip("\n"), values) for e in events]


def describe(codebuild: Any, logs: Any, build_id: str, lines: int) -> CodeBuildBuild:
    found = codebuild.batch_get_builds(ids=[build_id]).get("builds", [])
    if not found:
        raise ToolFailure(
            ErrorCode.NOT_FOUND,
            f"No CodeBuild build {build_id!r}.",
            "Check the id (PROJECT:UUID) and the region; start_codebuild returns it.",
            {"build_id": build_id},
        )
    build = found[0]
    group, stream = log_location(build)
    complete = bool(build.get("buildComplete")) or build.get("buildStatus") != "IN_PROGRESS"
    return CodeBuildBuild(
        build_id=build["id"],
        project_name=build["projectName"],
        status=build.get("buildStatus", "IN_PROGRESS"),
        current_phase=build.get("currentPhase"),
        complete=complete,
        phases=[
            BuildPhase(
                name=p["phaseType"],
                status=p.get("phaseStatus"),
                duration_s=p.get("durationInSeconds"),
            )
            for p in build.get("phases", [])
        ],
        log_group=group,
        log_stream=stream,
        log_tail=log_tail(logs, group, stream, lines) if lines else [],
        next_step=_next_step(build, codebuild.meta.region_name, complete),
    )


def _next_step(build: dict[str, Any], region: str, complete: bool) -> NextStep | None:
    """Follow a running build; read more of a failed one's log; none for a success."""
    if complete and build.get("buildStatus") == "SUCCEEDED":
        return None
    return NextStep(
        tool="get_codebuild_build",
        arguments={"build_id": build["id"], "region": region, "log_lines": 200 if complete else 50},
        why="read more of its log" if complete else "follow the build",
    )


def get_build(build_id: str, region: str | None, lines: int) -> CodeBuildBuild:
    codebuild, logs = _clients(region)
    return describe(codebuild, logs, build_id, lines)


def start_and_follow(
    project_name: str,
    region: str | None,
    env: dict[str, str],
    source_version: str | None,
    follow_s: float,
    lines: int,
    progress: Progress | None = None,
) -> CodeBuildBuild:
    progress = progress or NullProgress()
    codebuild, logs = _clients(region)
    params: dict[str, Any] = {"projectName": project_name}
    if env:
        params["environmentVariablesOverride"] = environment_overrides(env)
    if source_version:
        params["sourceVersion"] = source_version
    build_id = codebuild.start_build(**params)["build"]["id"]
    progress.report(0, None, f"started {build_id}")
    seen = 0

    def look() -> CodeBuildBuild:
        nonlocal seen
        result = describe(codebuild, logs, build_id, lines)
        done = sum(1 for p in result.phases if p.status)
        new_lines = result.log_tail[seen:] if len(result.log_tail) > seen else []
        seen = len(result.log_tail)
        for line in new_lines[-5:]:
            progress.report(done, None, line)
        progress.report(done, None, f"{result.current_phase or '-'} {result.status}")
        return result

    return poll_until(look, lambda result: result.complete, follow_s, POLL_S)
