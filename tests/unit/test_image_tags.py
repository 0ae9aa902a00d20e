"""Tag strategies: an explicit tag wins; semantic, git-sha, latest and auto each pick
their tag (semantic against a daemon's images: tests/integration/test_build_image.py)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from skills.image_builder.tags import (
    REPOSITORY_PATTERN,
    TAG_PATTERN,
    build_inputs,
    choose_tag,
    concrete_strategy,
    git_sha_tag,
    next_semantic,
)
from skills.shared.errors import ToolFailure


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com",
           "PATH": "/usr/bin:/bin"}  # fmt: skip
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          env=env, check=True)  # fmt: skip
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    _git(tmp_path, "init", "-q")
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    _git(tmp_path, "add", "Dockerfile")
    _git(tmp_path, "commit", "-q", "-m", "first")
    return tmp_path


SEMANTIC = [
    ([], "v0.1.0"),
    (["latest", "abc1234", "v1.2", "1.2.3"], "v0.1.0"),  # none is exactly vX.Y.Z
    (["v0.1.0"], "v0.1.1"),
    (["v1.4.2", "v1.10.0", "v1.9.9", "latest"], "v1.10.1"),  # numeric, not text order
    (["v2.0.0", "v10.0.0"], "v10.0.1"),
    (["v1.2.3-rc1", "v1.2.2"], "v1.2.3"),
]


@pytest.mark.parametrize(("tags", "expected"), SEMANTIC)
def test_semantic_is_the_next_patch_above_the_highest_version(tags, expected):
    assert next_semantic(tags) == expected


def test_git_sha_is_the_short_commit(repo):
    tag = git_sha_tag(repo)
    assert tag == _git(repo, "rev-parse", "--short", "HEAD")
    assert re.fullmatch(TAG_PATTERN, tag)


def test_git_sha_marks_uncommitted_changes_with_their_content(repo):
    sha = _git(repo, "rev-parse", "--short", "HEAD")
    index_before = _git(repo, "diff", "--cached", "--name-only")
    (repo / "Dockerfile").write_text("FROM scratch\nLABEL a=b\n")
    first = git_sha_tag(repo)
    assert re.fullmatch(rf"{sha}-dirty-[0-9a-f]{{12}}", first) and re.fullmatch(TAG_PATTERN, first)
    assert git_sha_tag(repo) == first  # the same tree, the same tag
    (repo / "Dockerfile").write_text("FROM scratch\nLABEL a=c\n")
    second = git_sha_tag(repo)
    assert second.startswith(f"{sha}-dirty-") and second != first  # never reused
    objects = _git(repo, "count-objects")
    (repo / "weights.bin").write_bytes(b"\xff\xfe not UTF-8, a new file the build may COPY")
    third = git_sha_tag(repo)
    assert third not in (first, second)
    (repo / "weights.bin").write_bytes(b"\xff\xfe other weights")
    assert git_sha_tag(repo) not in (first, second, third)  # a new file's content counts
    assert _git(repo, "count-objects") == objects  # nothing written into the repository
    (repo / "weights.bin").write_bytes(b"\xff\xfe not UTF-8, a new file the build may COPY")
    assert git_sha_tag(repo) == third
    assert _git(repo, "diff", "--cached", "--name-only") == index_before  # index untouched
    (repo / "weights.bin").unlink()
    assert git_sha_tag(repo) == second
    _git(repo, "checkout", "--", "Dockerfile")
    assert git_sha_tag(repo) == sha  # clean again


def test_an_ignored_file_does_not_make_the_tree_dirty(repo):
    (repo / ".gitignore").write_text("runs/\n")
    _git(repo, "add", ".gitignore")
    _git(repo, "commit", "-qm", "ignore runs")
    (repo / "runs").mkdir()
    (repo / "runs" / "log.txt").write_text("a job's log\n")
    assert git_sha_tag(repo) == _git(repo, "rev-parse", "--short", "HEAD")


def test_git_sha_outside_a_repository_is_a_typed_error(tmp_path):
    with pytest.raises(ToolFailure) as caught:
        git_sha_tag(tmp_path)
    assert caught.value.code == "invalid_input" and caught.value.exit_status == 2
    assert "tag_strategy" in caught.value.hint


def test_latest_is_latest(tmp_path):
    assert choose_tag(tag=None, strategy="latest", repository="r", context=tmp_path,
                      client=None) == ("latest", "latest")  # fmt: skip


def test_auto_is_git_sha_in_a_repository_and_semantic_outside(repo, tmp_path_factory):
    assert concrete_strategy("auto", repo) == "git-sha"
    assert choose_tag(tag=None, strategy="auto", repository="r", context=repo,
                      client=None) == (git_sha_tag(repo), "git-sha")  # fmt: skip
    assert concrete_strategy("auto", tmp_path_factory.mktemp("plain")) == "semantic"


def test_an_explicit_tag_wins_over_any_strategy(tmp_path):
    for strategy in ("auto", "semantic", "git-sha", "latest"):
        assert choose_tag(tag="v9", strategy=strategy, repository="r", context=tmp_path,
                          client=None) == ("v9", "explicit")  # fmt: skip


GOOD_REPOSITORIES = ["fsdp-eks-trainer", "localhost:5000/team/trainer",
                     "123.dkr.ecr.us-east-1.amazonaws.com/trainer", "a__b/c.d"]  # fmt: skip


@pytest.mark.parametrize("good", GOOD_REPOSITORIES)
def test_repository_names_docker_accepts(good):
    assert re.fullmatch(REPOSITORY_PATTERN, good)


@pytest.mark.parametrize("bad", ["Upper", "-x", "a//b", "a/", "x:tag", "a b", ""])
def test_repository_names_docker_refuses(bad):
    assert not re.fullmatch(REPOSITORY_PATTERN, bad)


@pytest.mark.parametrize("bad", ["", "-lead", ".lead", "a" * 129, "has space", "a:b", "ü"])
def test_tags_docker_refuses(bad):
    assert not re.fullmatch(TAG_PATTERN, bad)


def test_git_sha_names_the_build_inputs_too(repo):
    """Issue 29: a rebuild of one dirty tree on another base got the first build's tag."""
    sha = _git(repo, "rev-parse", "--short", "HEAD")
    on_a = build_inputs("pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime", None)
    on_b = build_inputs("pytorch/pytorch:2.13.0-cuda12.8-cudnn9-runtime", None)
    # A clean tree: the bare sha only when nothing else decides the image.
    assert git_sha_tag(repo, build_inputs(None, {})) == sha
    clean_a, clean_b = git_sha_tag(repo, on_a), git_sha_tag(repo, on_b)
    assert re.fullmatch(rf"{sha}-build-[0-9a-f]{{12}}", clean_a) and clean_a != clean_b
    assert git_sha_tag(repo, on_a) == clean_a  # the same inputs, the same tag
    (repo / "Dockerfile").write_text("FROM scratch\nLABEL a=b\n")
    dirty = {git_sha_tag(repo, inputs) for inputs in (None, on_a, on_b)}
    assert len(dirty) == 3 and all(t.startswith(f"{sha}-dirty-") for t in dirty)
    assert all(re.fullmatch(TAG_PATTERN, t) for t in dirty)
    # Build arguments count, in any order; a value is not confused with another's name.
    args = [{"A": "1", "B": "2"}, {"B": "2", "A": "1"}, {"A": "1", "B": "3"}, {"A": "1B=2"}]
    tags = [git_sha_tag(repo, build_inputs(None, a)) for a in args]
    assert tags[0] == tags[1] and len({tags[0], tags[2], tags[3]}) == 3
    assert choose_tag(tag=None, strategy="git-sha", repository="r", context=repo, client=None,
                      inputs=on_b) == (git_sha_tag(repo, on_b), "git-sha")  # fmt: skip
