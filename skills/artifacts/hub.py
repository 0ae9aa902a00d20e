"""Pushing an export to the Hugging Face Hub: huggingface_hub's create_repo (private
unless asked otherwise) and upload_folder. The token is HF_TOKEN from the environment,
never an argument (an argument lands in transcripts and logs); the endpoint is what
huggingface_hub reads from the environment (HF_ENDPOINT), never an argument either."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from skills.shared.errors import ErrorCode, ToolFailure
from skills.shared.progress import Progress
from skills.shared.secrets import redact

TOKEN_ENV = "HF_TOKEN"
DEFAULT_ENDPOINT = "https://huggingface.co"
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}$")


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def check_repo_id(repo_id: str | None) -> str:
    if not repo_id or not REPO_ID.match(repo_id) or ".." in repo_id:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"push_to_hub needs repo_id as <user or org>/<name>, not {repo_id!r}.",
            "Pass repo_id, e.g. my-org/llama3-8b-sft.",
            {"problems": [{"field": "repo_id", "problem": "org/name"}]},
        )
    return repo_id


def token() -> str:
    value = os.environ.get(TOKEN_ENV)
    if not value:
        raise ToolFailure(
            ErrorCode.NO_CREDENTIALS,
            f"push_to_hub needs {TOKEN_ENV} (a write token) in the environment.",
            f"export {TOKEN_ENV}=hf_... where the CLI or the MCP server runs (its `env` in "
            "the client's config); a token is never a tool argument.",
        )
    return value


def push(
    folder: Path, repo_id: str, public: bool, progress: Progress | None
) -> tuple[str, str, bool, list[str]]:
    """(repo URL, commit id, private, warnings): the repo made if missing, the folder
    uploaded as one commit. An existing public repo is refused unless public=true."""
    import httpx2
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    secret = token()
    api = HfApi(token=secret)
    warnings: list[str] = []
    try:
        try:
            info: Any = api.repo_info(repo_id, token=secret)
        except RepositoryNotFoundError:
            info = None
        if info is not None and not info.private and not public:
            raise ToolFailure(
                ErrorCode.CONFLICT,
                f"The Hub repo {repo_id} exists and is public; nothing was pushed.",
                "Pass public=true to push to it as it is, or choose another repo_id (a new "
                "one is created private).",
                {"repo_id": repo_id},
            )
        private = bool(info.private) if info is not None else not public
        if info is None:
            api.create_repo(repo_id, private=private, exist_ok=True, token=secret)
        elif public and info.private:
            warnings.append(f"{repo_id} exists private and stays so (visibility: on the Hub)")
        if progress is not None:
            progress.report(0, None, f"uploading {folder} to {repo_id}")
        commit = api.upload_folder(
            folder_path=str(folder),
            repo_id=repo_id,
            token=secret,
            commit_message="Upload export with fsdp-eks transfer_job_artifacts",
        )
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        code = ErrorCode.ACCESS_DENIED if status in (401, 403) else ErrorCode.SERVICE_ERROR
        raise ToolFailure(
            code,
            redact(f"The Hub answered {status}: {exc}", [secret])[:500],
            f"Check that {TOKEN_ENV} may write to {repo_id.split('/')[0]} (a write token)."
            if code == ErrorCode.ACCESS_DENIED
            else "Read the message; push again if it looks transient.",
            {"repo_id": repo_id, "status": status},
        ) from None
    except httpx2.TransportError as exc:
        raise ToolFailure(
            ErrorCode.ENDPOINT_UNREACHABLE,
            f"Cannot reach the Hub at {endpoint()}: {type(exc).__name__}.",
            "Check the network (and HF_ENDPOINT, if this environment sets one).",
            {"endpoint": endpoint()},
        ) from None
    return f"{endpoint()}/{repo_id}", str(commit.oid or ""), private, warnings
