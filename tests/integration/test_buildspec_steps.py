"""The buildspec's helper steps (commands/_buildspec.py) as CodeBuild runs them: a
subprocess in a source directory without .git, against moto's ECR. semantic continues
the target repository's versions; image-detail never ends in a traceback."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"


def _step(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "AWS_REGION": "us-east-1", **env}
    return subprocess.run([sys.executable, str(ROOT / "commands" / "_buildspec.py"), *args],
                          cwd=cwd, env=environ, capture_output=True, text=True, timeout=120,
                          check=False)  # fmt: skip


def _record(ecr, repository: str, tag: str) -> None:
    """An image as ECR's push records it (moto has no registry data plane)."""
    digest = "sha256:" + hashlib.sha256(tag.encode()).hexdigest()
    config = {"digest": digest, "size": 1,
              "mediaType": "application/vnd.docker.container.image.v1+json"}  # fmt: skip
    manifest = json.dumps({"schemaVersion": 2, "config": config, "layers": [],
                           "mediaType": MANIFEST_V2})  # fmt: skip
    ecr.put_image(repositoryName=repository, imageManifest=manifest, imageTag=tag)


def test_semantic_continues_the_newest_version_in_the_ecr_repository(moto_server, tmp_path):
    ecr = boto3.client("ecr")
    ecr.create_repository(repositoryName="ci/semver")
    for tag in ("v0.1.0", "v0.9.3", "v0.10.1", "latest", "abc1234"):
        _record(ecr, "ci/semver", tag)
    done = _step(tmp_path, "tag-flag", TAG_STRATEGY="semantic", ECR_REPOSITORY="ci/semver")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "--tag v0.10.2"  # numeric order, not text order
    _record(ecr, "ci/semver", "v0.10.2")  # the build above pushed; the next one moves on
    done = _step(tmp_path, "tag-flag", TAG_STRATEGY="semantic", ECR_REPOSITORY="ci/semver")
    assert done.stdout.strip() == "--tag v0.10.3"


def test_semantic_starts_at_the_first_version_for_a_new_repository(moto_server, tmp_path):
    done = _step(tmp_path, "tag-flag", TAG_STRATEGY="semantic", ECR_REPOSITORY="ci/never-made")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "--tag v0.1.0"


def test_semantic_without_a_readable_ecr_leaves_the_tag_to_build_image(moto_server, tmp_path):
    done = _step(
        tmp_path,
        "tag-flag",
        TAG_STRATEGY="semantic",
        ECR_REPOSITORY="ci/x",
        AWS_ENDPOINT_URL="http://127.0.0.1:9",
    )  # nothing listens on port 9
    assert done.returncode == 0 and done.stdout.strip() == ""
    assert "could not be read" in done.stderr and "Traceback" not in done.stderr


def test_git_sha_without_git_still_comes_from_the_source_version(tmp_path):
    sha = "0123abcd4567ef890123abcd4567ef890123abcd"
    done = _step(tmp_path, "tag-flag", TAG_STRATEGY="git-sha",
                 CODEBUILD_RESOLVED_SOURCE_VERSION=sha)  # fmt: skip
    assert done.stdout.strip() == "--tag 0123abc"


PUSHED = {
    "image_uri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/ci/trainer:v0.1.0",
    "image_uri_digest": "123456789012.dkr.ecr.us-east-1.amazonaws.com/ci/trainer@sha256:ab",
    "digest": "sha256:ab",
    "tag": "v0.1.0",
}
REFUSED = {"error": {"code": "confirmation_required", "message": "Tag v0.1.0 exists.",
                     "hint": "Pass --confirm to move it.", "details": {}}}  # fmt: skip


@pytest.mark.parametrize(
    ("written", "said"),
    [
        (json.dumps(REFUSED), "confirmation_required: Tag v0.1.0 exists."),
        ("", "not the push step's JSON result"),
        ("[1, 2]", "not the push step's JSON result"),
        (json.dumps({"image_uri": PUSHED["image_uri"]}), "lacks digest, tag, image_uri_digest"),
        (None, "missing; the push step wrote nothing"),
    ],
)
def test_image_detail_of_a_failed_push_says_why_without_a_traceback(tmp_path, written, said):
    if written is not None:
        (tmp_path / "push.json").write_text(written)
    done = _step(tmp_path, "image-detail", "push.json")
    assert done.returncode == 1
    assert said in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "imageDetail.json").exists()


def test_image_detail_of_a_push_writes_codebuilds_file(tmp_path):
    (tmp_path / "push.json").write_text(json.dumps({**PUSHED, "repository": "ci/trainer"}))
    done = _step(tmp_path, "image-detail", "push.json")
    assert done.returncode == 0, done.stderr
    detail = json.loads((tmp_path / "imageDetail.json").read_text())
    assert detail == {
        "ImageURI": PUSHED["image_uri"],
        "ImageDigest": "sha256:ab",
        "ImageTag": "v0.1.0",
        "ImageURIWithDigest": PUSHED["image_uri_digest"],
    }
