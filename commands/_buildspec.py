"""Steps of buildspec.yml that need logic (kept here, not in YAML). Not a tool.

    python commands/_buildspec.py test               # tests at TEST_LEVEL, JUnit XML in reports/
    python commands/_buildspec.py tag-flag           # `--tag <sha>` for git-sha without .git,
                                                     # `--tag vX.Y.Z` next in ECR for semantic
    python commands/_buildspec.py pull-cache         # pull the repository's newest image
    python commands/_buildspec.py cache-flag         # --cache_from <that image>, if any
    python commands/_buildspec.py image build.json   # the image build_image made
    python commands/_buildspec.py image-detail push.json   # writes imageDetail.json

Environment (CodeBuild's and the project's): TEST_LEVEL (none | quick | standard |
full), TEST_PATHS (overrides the level's paths), TAG_STRATEGY,
CODEBUILD_RESOLVED_SOURCE_VERSION, ECR_REPOSITORY, AWS_REGION.
"""

from __future__ import annotations

if __name__ == "__main__":  # run as a script: make the checkout importable
    import _bootstrap  # noqa: F401

import json
import os
import subprocess
import sys
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from skills.cloud.clients import docker_client
from skills.cloud.ecr_repository import ecr_client, image_tags, latest_image
from skills.cloud.registry_credentials import credentials_for, normalize_host
from skills.ecr_publisher.push import REGISTRY_HOST_ENV, ecr_login
from skills.image_builder.tags import next_semantic
from skills.shared.errors import ToolFailure

LEVELS = {
    "none": [],
    "quick": ["tests/unit"],
    "standard": ["tests/unit", "tests/integration"],
    "full": ["tests"],
}
SHORT_SHA = 7


# Where pull-cache leaves the reference of the image it pulled, for cache-flag.
CACHE_FILE = ".cache-from"


def run_tests() -> int:
    level = os.environ.get("TEST_LEVEL", "standard")
    if level not in LEVELS:
        print(f"TEST_LEVEL {level!r} is not one of {', '.join(LEVELS)}", file=sys.stderr)
        return 2
    paths = os.environ.get("TEST_PATHS", "").split() or LEVELS[level]
    if not paths:
        print("TEST_LEVEL none: no tests run")
        return 0
    Path("reports").mkdir(exist_ok=True)
    argv = [sys.executable, "-m", "pytest", *paths, "-q", "--junitxml=reports/junit.xml"]
    return subprocess.run(argv, check=False).returncode


def tag_flag() -> str:
    """git-sha (or auto) where the source has no .git (CodeBuild's S3/CodePipeline
    sources): the tag comes from CODEBUILD_RESOLVED_SOURCE_VERSION, as build_image's
    own `git rev-parse --short HEAD` would give it in a checkout. semantic (or auto with
    neither): the next version above the newest vX.Y.Z in the target ECR repository, as
    a fresh build host has no local image to count from."""
    strategy = os.environ.get("TAG_STRATEGY", "auto")
    sha = os.environ.get("CODEBUILD_RESOLVED_SOURCE_VERSION", "")
    in_repo = (
        subprocess.run(
            ["git", "rev-parse", "--is-inside-work-tree"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        == "true"
    )
    if strategy in ("git-sha", "auto") and not in_repo and len(sha) >= SHORT_SHA:
        return f"--tag {sha[:SHORT_SHA].lower()}"
    if strategy == "semantic" or (strategy == "auto" and not in_repo):
        return _semantic_flag()
    return ""


def _semantic_flag() -> str:
    """`--tag vX.Y.Z` continuing the ECR repository's versions; nothing (build_image
    counts local images) when ECR cannot be read, said on stderr."""
    try:
        tags = image_tags(os.environ["ECR_REPOSITORY"], os.environ["AWS_REGION"])
    except KeyError as missing:
        print(
            f"tag-flag: {missing.args[0]} is not set; semantic counts local images", file=sys.stderr
        )
        return ""
    except (ToolFailure, BotoCoreError, ClientError) as exc:
        print(
            f"tag-flag: the ECR repository's tags could not be read ({exc}); semantic "
            "counts local images",
            file=sys.stderr,
        )
        return ""
    return f"--tag {next_semantic(tags)}"


def pull_cache() -> int:
    """Pull the repository's newest image so its layers are local (best effort: a cache
    miss only makes the build slower, never fails it)."""
    try:
        repository, region = os.environ["ECR_REPOSITORY"], os.environ["AWS_REGION"]
        newest = latest_image(repository, region)
        if newest is None:
            print("cache: the repository has no image yet")
            return 0
        host = os.environ.get(REGISTRY_HOST_ENV)
        ref = f"{host}/{newest.split('/', 1)[1]}" if host else newest
        # The ECR token only where the credential policy allows it; else anonymously.
        login = credentials_for(normalize_host(ref), ecr_login(ecr_client(region)))
        name, tag = ref.rsplit(":", 1) if "@" not in ref else (ref, None)
        docker_client().api.pull(name, tag=tag, auth_config=login.auth_config() if login else None)
        print(f"cache: pulled {ref}")
        Path(CACHE_FILE).write_text(ref)
    except Exception as exc:  # noqa: BLE001 - a cache is an optimization
        print(f"cache: none ({type(exc).__name__})")
    return 0


def cache_flag() -> str:
    """`--cache_from REF` for the image pull-cache pulled, else nothing."""
    try:
        return f"--cache_from {Path(CACHE_FILE).read_text().strip()}"
    except FileNotFoundError:
        return ""


def _step_result(path: str, step: str) -> dict:
    """A step's `--json` output, or SystemExit with one line saying what went wrong (a
    missing or empty file, not JSON, or the step's own error): never a traceback."""
    try:
        result = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SystemExit(f"{path}: missing; the {step} step wrote nothing") from None
    except (OSError, ValueError) as exc:
        raise SystemExit(f"{path}: not the {step} step's JSON result ({exc})") from None
    if not isinstance(result, dict):
        raise SystemExit(f"{path}: not the {step} step's JSON result")
    error = result.get("error")
    if isinstance(error, dict):
        raise SystemExit(
            f"{path}: the {step} step failed: {error.get('code')}: "
            f"{error.get('message')} Hint: {error.get('hint')}"
        )
    return result


def built_image(build_json: str) -> str:
    result = _step_result(build_json, "build")
    if result.get("status") != "built" or not result.get("tags"):
        raise SystemExit(f"{build_json}: no image was built (status {result.get('status')})")
    return str(result["tags"][0])


DETAIL_FIELDS = {
    "ImageURI": "image_uri",
    "ImageDigest": "digest",
    "ImageTag": "tag",
    "ImageURIWithDigest": "image_uri_digest",
}


def image_detail(push_json: str) -> None:
    result = _step_result(push_json, "push")
    missing = [key for key in DETAIL_FIELDS.values() if not result.get(key)]
    if missing:
        raise SystemExit(f"{push_json}: the push result lacks {', '.join(missing)}")
    detail = {name: result[key] for name, key in DETAIL_FIELDS.items()}
    Path("imageDetail.json").write_text(json.dumps(detail, indent=2) + "\n")
    print(f"imageDetail.json: {detail['ImageURI']}")


def main(argv: list[str]) -> int:
    step, *rest = argv or ["?"]
    if step == "test":
        return run_tests()
    if step == "tag-flag":
        print(tag_flag())
        return 0
    if step == "pull-cache":
        return pull_cache()
    if step == "cache-flag":
        print(cache_flag())
        return 0
    if step == "image" and rest:
        print(built_image(rest[0]))
        return 0
    if step == "image-detail" and rest:
        image_detail(rest[0])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
