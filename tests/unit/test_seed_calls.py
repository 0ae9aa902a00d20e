"""The seed document's calls as written (issue 32): the buildspec's defaults are the
document's, setup_codebuild takes its source from the project's git remote, and the MCP
server takes manage_eks_cluster(validate_components=True, auto_fix=True)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import anyio
import pytest
import yaml
from mcp import Client

from commands.setup_codebuild import setup_codebuild
from mcp_server import build_server
from skills.codebuild_pipeline.plan import remote_as_source_url
from skills.codebuild_pipeline.setup import git_remote_url
from skills.shared.errors import ToolFailure
from skills.shared.tooling import spec_of

ROOT = Path(__file__).resolve().parents[2]


def test_the_buildspecs_defaults_are_the_documents() -> None:
    variables = yaml.safe_load((ROOT / "buildspec.yml").read_text())["env"]["variables"]
    assert variables["TEST_LEVEL"] == "standard" and variables["TAG_STRATEGY"] == "auto"
    assert variables["PROJECT_NAME"] == "pytorch-fsdp"
    fields = spec_of(setup_codebuild).params.model_fields
    assert fields["test_level"].default == "standard" and fields["tag_strategy"].default == "auto"
    assert fields["source_url"].default is None


@pytest.mark.parametrize(
    "remote, url",
    [
        ("git@github.com:org/repo.git\n", "https://github.com/org/repo"),
        ("ssh://git@github.com/org/repo.git", "https://github.com/org/repo"),
        ("https://github.com/org/repo.git", "https://github.com/org/repo.git"),
        ("https://user:ghp_tok@github.com/org/repo", "https://github.com/org/repo"),
        (
            "ssh://git-codecommit.us-west-2.amazonaws.com/v1/repos/r",
            "https://git-codecommit.us-west-2.amazonaws.com/v1/repos/r",
        ),
    ],
)
def test_a_git_remote_becomes_a_source_url(remote: str, url: str) -> None:
    assert remote_as_source_url(remote) == url


def test_source_url_comes_from_the_projects_git_remote(tmp_path: Path) -> None:
    with pytest.raises(ToolFailure) as caught:
        git_remote_url(tmp_path)
    assert caught.value.code == "invalid_input" and "source_url" in caught.value.hint
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "remote", "add", "origin",
                    "git@github.com:team/pytorch-fsdp.git"], check=True)  # fmt: skip
    assert git_remote_url(tmp_path) == "https://github.com/team/pytorch-fsdp"


def _call(arguments: dict) -> dict:
    async def scenario():
        async with Client(build_server()) as client:
            result = await client.call_tool("manage_eks_cluster", arguments)
            return result

    result = anyio.run(scenario)
    text = result.content[0].text
    return json.loads(text) if result.is_error else {"ok": result.structured_content}


def test_manage_eks_cluster_takes_the_seeds_validate_components_over_mcp(tmp_path) -> None:
    kubeconfig = str(tmp_path / "absent-kubeconfig")
    seed = _call({"validate_components": True, "auto_fix": True, "kubeconfig": kubeconfig})
    plain = _call({"auto_fix": True, "kubeconfig": kubeconfig})
    assert "Extra inputs" not in json.dumps(seed)
    assert seed == plain  # the same call: validate is the default, auto_fix plans the fixes
    off = _call({"validate_components": False, "kubeconfig": kubeconfig})
    assert off["error"]["code"] == "invalid_input"
    assert "manage_eks_cluster" in off["error"]["hint"]
