"""get_training_job_logs: the last lines of a training job's log."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Annotated, Any

from pydantic import Field

from commands._cli import main_for
from skills.shared.log_tail import LastLines
from skills.shared.next_step import NextStep
from skills.shared.progress import Progress
from skills.shared.tooling import tool
from skills.training_job_deployer.job_spec import JobName
from skills.training_job_deployer.models import JobLogs
from skills.training_job_deployer.targets.by_name import TargetSettings, get_target

# The log's text a call returns at most (JSON-escaped, UTF-8): under the 40 KB result cap
# with the rest of the result, and under the MCP text's own excerpt size.
LOG_TEXT_BYTES = 30_000


@tool(read_only=True, idempotent=True)
def get_training_job_logs(
    *,
    job_name: JobName,
    target: TargetSettings,
    tail_lines: Annotated[int, Field(ge=1, le=10_000, description="Lines from the end.")] = 100,
    replica: Annotated[
        str | None,
        Field(
            pattern=r"^(master|worker|node)-\d{1,4}$",
            description="Cluster: e.g. worker-1 (TrainJob: node-1).",
        ),
    ] = None,
    previous: Annotated[
        bool, Field(strict=True, description="Cluster: the restarted container's log.")
    ] = False,
    since_seconds: Annotated[
        int | None, Field(ge=1, le=10**7, description="Cluster: only the last N seconds.")
    ] = None,
    all_ranks: Annotated[
        bool, Field(strict=True, description="Cluster: every pod's last lines.")
    ] = False,
    before: Annotated[
        int | None, Field(ge=0, description="A cut result's cursor: the lines before it.")
    ] = None,
    progress: Progress | None = None,
) -> JobLogs:
    """Return the last lines of a training job's log (torchrun and every rank).

    On a cluster: rank 0's pod by default, one replica, or every pod's last lines.
    The lines come whole up to 30 KB; past it, the last that fit and the call for
    the earlier ones. Secret values from this environment (HF_TOKEN, AWS keys) are
    masked as ***.
    """
    runner = get_target(target)
    chosen = {
        "replica": replica,
        "previous": previous,
        "since_seconds": since_seconds,
        "all_ranks": all_ranks,
    }
    options = {k: v for k, v in chosen.items() if v not in (None, False)}
    found = runner.log_tail(job_name, tail_lines, LOG_TEXT_BYTES, before=before, **options)
    shown = len(found.lines)
    return JobLogs(
        job_name=job_name,
        target=runner.name,
        log_path=runner.log_path(job_name),
        lines=shown,
        tail_lines=tail_lines,
        excerpt=_excerpt(found, tail_lines),
        next_step=_earlier(
            found, tail_lines, {"job_name": job_name, **runner.call_args(), **options}
        ),
        text="\n".join(found.lines),
    )


def _excerpt(found: LastLines, asked: int) -> str | None:
    """Why the text holds fewer lines than asked (None: it holds them all, or the log
    has no more)."""
    shown = len(found.lines)
    # A cluster's API serves a pod's log by its end only: no cursor into it.
    rest = "" if found.start is not None else "; a pod's earlier lines have no cursor"
    if found.cut:
        return (
            f"the end of a line longer than {LOG_TEXT_BYTES // 1000} KB, then {shown - 1} "
            f"whole lines: {shown} of the {asked} lines asked{rest}"
        )
    if shown < asked and found.earlier:
        return (
            f"the last {shown} of the {asked} lines asked: {LOG_TEXT_BYTES // 1000} KB a call{rest}"
        )
    return None


def _earlier(found: LastLines, asked: int, call: dict[str, Any]) -> NextStep | None:
    """The call for the lines before these: the same log from the cursor, as many as
    were asked and not shown (a cut line's part before counts as one)."""
    if found.start is None or not found.earlier or (len(found.lines) >= asked and not found.cut):
        return None
    rest = max(1, asked - len(found.lines) + (1 if found.cut else 0))
    return NextStep(
        tool="get_training_job_logs",
        arguments={**call, "tail_lines": rest, "before": found.start},
        why=f"the {rest} lines before these",
    )


main = main_for(get_training_job_logs)


if __name__ == "__main__":
    main()
