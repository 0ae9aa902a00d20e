"""The tag a build gets. An explicit `tag` always wins; otherwise `tag_strategy`:

- `semantic`: the next patch above the highest `vX.Y.Z` tag of the repository among
  the daemon's local images and, when the repository names a registry host, that
  registry's tags (`v1.4.2` -> `v1.4.3`); `v0.1.0` when there is none. Tags that are
  not exactly `vX.Y.Z` (`latest`, a git sha, `v1.2`) are ignored.
- `git-sha`: the short commit of the build context's git repository (`git rev-parse
  --short HEAD`); when the working tree differs from that commit (changed, staged or
  new files that git does not ignore) `-dirty-<hash>` follows, `<hash>` covering the
  diff, the new files' contents and the build's own inputs (base_image, build_args);
  on a clean tree built with such inputs, `-build-<hash>` of the inputs. So the tag
  names the content: an image is never labelled with a commit it was not built from,
  and two different images (two dirty trees, or one tree on two bases) never share a
  tag. A context outside a git repository is an invalid_input error.
- `latest`: `latest`.
- `auto`: `git-sha` inside a git repository, else `semantic`.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from skills.cloud.registry_images import list_tags, parse_image
from skills.shared.errors import ErrorCode, ToolFailure

TagStrategy = Literal["auto", "semantic", "git-sha", "latest"]
TAG_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$"
# Docker's repository grammar: [HOST[:PORT]/]component(/component)*, lowercase.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
REPOSITORY_PATTERN = (
    rf"^(?:(?:localhost|[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+|[A-Za-z0-9-]+:\d+)(?::\d+)?/)?"
    rf"{_COMPONENT}(?:/{_COMPONENT})*$"
)
FIRST_VERSION = "v0.1.0"
# Characters of the changes' hash in a dirty tag: 12 hex, as git's own short ids
# grow to avoid collisions in large repositories.
DIRTY_HASH_CHARS = 12
_SEMVER = re.compile(r"^v(\d+)\.(\d+)\.(\d+)$")


def next_semantic(tags: Iterable[str]) -> str:
    """The next patch above the highest vX.Y.Z in `tags`, else FIRST_VERSION."""
    versions = [tuple(map(int, m.groups())) for t in tags if (m := _SEMVER.match(t))]
    if not versions:
        return FIRST_VERSION
    major, minor, patch = max(versions)
    return f"v{major}.{minor}.{patch + 1}"


def _git(context: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(context), *args], capture_output=True, text=True, timeout=30
    )


def in_git_repo(context: Path) -> bool:
    try:
        done = _git(context, "rev-parse", "--is-inside-work-tree")
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and done.stdout.strip() == "true"


def build_inputs(base_image: str | None, build_args: Mapping[str, str] | None) -> dict[str, str]:
    """What besides the tree decides the image: the base it replaces the FROM with and the
    build arguments (a Dockerfile's defaults are in the tree already)."""
    inputs = {f"build_arg:{k}": str(v) for k, v in (build_args or {}).items()}
    if base_image:
        inputs["base_image"] = base_image
    return inputs


def _inputs_digest(inputs: Mapping[str, str]) -> bytes:
    return json.dumps(dict(sorted(inputs.items())), separators=(",", ":")).encode()


def git_sha_tag(context: Path, inputs: Mapping[str, str] | None = None) -> str:
    if not in_git_repo(context):
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"tag_strategy git-sha needs a git repository, and {context} is not in one.",
            "Use tag_strategy semantic or latest, pass a tag, or build from a git checkout.",
            {"problems": [{"field": "tag_strategy", "problem": "context is not a git repo"}]},
        )
    sha = _git(context, "rev-parse", "--short", "HEAD")
    if sha.returncode != 0:  # a repository with no commit yet
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"The git repository at {context} has no commit yet.",
            "Commit first, or use tag_strategy semantic or latest, or pass a tag.",
            {"problems": [{"field": "tag_strategy", "problem": "no commit yet"}]},
        )
    changes = working_tree_changes(context)
    if not changes and not inputs:
        return sha.stdout.strip()
    digest = hashlib.sha256((changes or "").encode())
    if inputs:
        digest.update(b"\0" + _inputs_digest(inputs))
    kind = "dirty" if changes else "build"
    return f"{sha.stdout.strip()}-{kind}-{digest.hexdigest()[:DIRTY_HASH_CHARS]}"


def working_tree_changes(context: Path) -> str | None:
    """A hash of how the working tree differs from HEAD (tracked changes, staged or not,
    and the contents of files git does not ignore), or None when it does not. Read-only:
    `git diff` and `git hash-object` without -w write nothing into the repository."""
    top = _git_output(context, "rev-parse", "--show-toplevel").decode().strip()
    diff = _git_output(top, "diff", "HEAD", "--binary", "--no-ext-diff", "--no-color")
    listed = _git_output(top, "ls-files", "--others", "--exclude-standard", "-z")
    paths = [p for p in listed.split(b"\0") if p]
    if not diff and not paths:
        return None
    digest = hashlib.sha256(diff)
    if paths:
        blobs = _git_output(top, "hash-object", "--stdin-paths", stdin=b"\n".join(paths))
        for path, blob in zip(paths, blobs.split(), strict=True):
            digest.update(b"\0" + path + b"\0" + blob)
    return digest.hexdigest()


def _git_output(where: Path | str, *args: str, stdin: bytes | None = None) -> bytes:
    done = subprocess.run(
        ["git", "-C", str(where), *args], capture_output=True, input=stdin, timeout=300, check=False
    )
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip()[:300]
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"git could not read the working tree at {where}: {said}",
            "Fix the repository (git status shows why), or pass a tag.",
            {"problems": [{"field": "tag_strategy", "problem": "unreadable working tree"}]},
        )
    return done.stdout


def _normalized(name: str) -> str:
    """podman names `trainer` as docker.io/library/trainer (and localhost/trainer)."""
    for prefix in ("docker.io/library/", "docker.io/", "localhost/"):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def local_tags(client: Any, repository: str) -> list[str]:
    """Tags of `repository` among the daemon's images."""
    wanted = _normalized(repository)
    found = []
    for image in client.api.images():
        for repo_tag in image.get("RepoTags") or []:
            name, _, tag = repo_tag.rpartition(":")
            if name and _normalized(name) == wanted:
                found.append(tag)
    return found


def registry_tags(repository: str) -> list[str]:
    """Tags in the repository's registry, when it names a registry host."""
    if parse_image(repository + ":x").on_docker_hub:
        return []  # a bare name is a local image here; Docker Hub is not where builds go
    return list_tags(repository)


def concrete_strategy(strategy: TagStrategy, context: Path) -> TagStrategy:
    """`auto` made concrete: git-sha inside a git repository, else semantic."""
    if strategy == "auto":
        return "git-sha" if in_git_repo(context) else "semantic"
    return strategy


def choose_tag(
    *,
    tag: str | None,
    strategy: TagStrategy,
    repository: str,
    context: Path,
    client: Any,
    inputs: Mapping[str, str] | None = None,
) -> tuple[str, str]:
    """(tag, how it was chosen). `inputs`: build_inputs(...), named by a git-sha tag."""
    if tag:
        return tag, "explicit"
    strategy = concrete_strategy(strategy, context)
    if strategy == "latest":
        return "latest", "latest"
    if strategy == "git-sha":
        return git_sha_tag(context, inputs), "git-sha"
    existing = local_tags(client, repository) + registry_tags(repository)
    return next_semantic(existing), "semantic"
