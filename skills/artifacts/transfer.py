"""transfer_job_artifacts' one call: fetch a checkpoint or an export (s3://, a cluster's
claim, a local job's folder) into a local folder, or push a local export folder to the
Hugging Face Hub; a dry run says what would be written and changes nothing."""

from __future__ import annotations

import os
from pathlib import Path

from skills.artifacts import claim, hub
from skills.artifacts.local_files import Entry, existing, write
from skills.artifacts.models import SHOWN, Action, TransferResult
from skills.artifacts.sources import Source, local_entries, parse, s3_entries
from skills.cloud.clients import aws_session
from skills.kube.client import KubeJson
from skills.kube.fields import ClusterAccess
from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.next_step import NextStep
from skills.shared.progress import Progress


def transfer(
    action: Action,
    source: str,
    dest: str | None,
    repo_id: str | None,
    public: bool,
    access: ClusterAccess,
    confirm: bool,
    dry_run: bool,
    progress: Progress | None = None,
) -> TransferResult:
    if action == "push_to_hub":
        return _push(source, repo_id, public, dry_run, progress)
    return _fetch(source, dest, access, confirm, dry_run, progress)


def _fetch(
    source: str,
    dest: str | None,
    access: ClusterAccess,
    confirm: bool,
    dry_run: bool,
    progress: Progress | None,
) -> TransferResult:
    if not dest:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            "fetch needs dest: the local folder to copy into.",
            "Pass dest, e.g. runs/llama3-8b/export.",
            {"problems": [{"field": "dest", "problem": "required for fetch"}]},
        )
    where = parse(source)
    folder = Path(dest).expanduser()
    if where.kind == "claim" and dry_run:  # the pod is the plan: nothing is listed yet
        return TransferResult(
            action="fetch",
            status="planned",
            source=source,
            dest=str(folder),
            plan=claim.pod(where, access.namespace, "fsdp-eks-fetch-<random>"),
            message=f"a pod mounts claim {where.claim} read-only in namespace "
            f"{access.namespace}, packs {where.key or '/'} (at most "
            f"{claim.LIMIT_BYTES >> 20} MiB packed) into its log, and is deleted",
        )
    entries = _entries(where, access, progress)
    total = sum(e.size for e in entries)
    if dry_run:
        replaced = existing(folder, entries)
        message = "dry run: nothing was written" + (
            " (the files listed exist: confirm=true overwrites them)" if replaced else ""
        )
    else:
        replaced = write(folder, entries, confirm, progress)
        message = f"{len(entries)} file(s) written under {folder}"
    return TransferResult(
        action="fetch",
        status="planned" if dry_run else "done",
        source=source,
        dest=str(folder),
        files=len(entries),
        bytes=total,
        overwritten=replaced[:SHOWN],
        overwritten_total=len(replaced),
        message=message,
    )


def _entries(where: Source, access: ClusterAccess, progress: Progress | None) -> list[Entry]:
    if where.kind == "s3":
        return s3_entries(aws_session(None, access.region).client("s3"), where)
    if where.kind == "claim":
        return claim.fetch(KubeJson(access.api_client()), where, access.namespace, progress)
    return local_entries(where)


def _push(
    source: str, repo_id: str | None, public: bool, dry_run: bool, progress: Progress | None
) -> TransferResult:
    repo = hub.check_repo_id(repo_id)
    where = parse(source)
    if where.kind != "local":
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"push_to_hub uploads a local folder, not {source!r}.",
            "Fetch it first (action=fetch with dest), then push that folder.",
            {"problems": [{"field": "source", "problem": "a local folder"}]},
            NextStep(
                tool="transfer_job_artifacts",
                arguments={"action": "fetch", "source": source, "dest": "runs/export"},
                why="copy it here first",
            ),
        )
    folder = Path(source).expanduser()
    if not folder.is_dir():
        raise ToolFailure(
            ErrorCode.NOT_A_DIRECTORY,
            f"{source} is not a folder.",
            "Give the export folder (python -m trainer.export --out <folder>).",
            {"source": source},
        )
    entries = local_entries(where)
    total = sum(e.size for e in entries)
    url = f"{hub.endpoint()}/{repo}"
    if dry_run:
        warnings = (
            [] if os.environ.get(hub.TOKEN_ENV) else [f"no {hub.TOKEN_ENV}: a push is refused"]
        )
        if not (folder / "config.json").exists():
            warnings.append("no config.json: the Hub will not load it as a model")
        return TransferResult(
            action="push_to_hub",
            status="planned",
            source=source,
            dest=url,
            files=len(entries),
            bytes=total,
            private=not public,
            warnings=warnings,
            message="dry run: nothing was uploaded",
        )
    url, commit, private, warnings = hub.push(folder, repo, public, progress)
    return TransferResult(
        action="push_to_hub",
        status="done",
        source=source,
        dest=url,
        files=len(entries),
        bytes=total,
        private=private,
        commit=commit,
        warnings=warnings,
        message=f"pushed {len(entries)} file(s) to {url}" + (" (private)" if private else ""),
    )
