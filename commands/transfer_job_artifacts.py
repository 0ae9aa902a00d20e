"""transfer_job_artifacts: fetch a checkpoint or an export to a local folder, or push an
export folder to the Hugging Face Hub."""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

from typing import Annotated

from pydantic import Field

from commands._cli import main_for
from skills.artifacts.models import Action, TransferResult
from skills.artifacts.transfer import transfer
from skills.kube.fields import ClusterAccess
from skills.shared.confirm import Confirm
from skills.shared.paths import LocalPath
from skills.shared.progress import Progress
from skills.shared.tooling import Flatten, tool


@tool(read_only=False, destructive=True, operation=True)
def transfer_job_artifacts(
    *,
    action: Annotated[Action, Field(description="See above.")],
    source: Annotated[
        str,
        Field(min_length=1, max_length=4096, description="s3://, pvc:<claim>/<path> or folder."),
        LocalPath(writable=False, s3=True, claim=True),
    ],
    dest: Annotated[
        str | None,
        Field(min_length=1, max_length=4096, description="fetch: local folder."),
        LocalPath(writable=True),
    ] = None,
    repo_id: Annotated[str | None, Field(max_length=200, description="Hub org/name.")] = None,
    public: Annotated[bool, Field(strict=True, description="Public Hub repo.")] = False,
    access: Annotated[ClusterAccess, Flatten()],
    confirm: Annotated[Confirm, Field(description="Overwrite files.")] = False,
    dry_run: Annotated[bool, Field(strict=True, description="Plan only.")] = False,
    progress: Progress | None = None,
) -> TransferResult:
    """Fetch a checkpoint or export into dest, or push_to_hub a folder to repo_id
    (private unless public; HF_TOKEN from env).

    fetch reads s3://, pvc:<claim>/<path> (through a short-lived pod) or a local folder;
    existing files are overwritten only with confirm. A transfer that outlasts the
    caller's wait_seconds runs on as an operation (get_operation follows it)."""
    return transfer(action, source, dest, repo_id, public, access, confirm, dry_run, progress)


main = main_for(transfer_job_artifacts)


if __name__ == "__main__":
    main()
