"""Every shipped SKILL.md loads in both clients: Claude Code (code.claude.com/docs/en/skills;
Anthropic's Agent Skills rules: name lowercase letters, digits and hyphens, <= 64
characters, no reserved word; description non-empty, <= 1024, no XML tags) and opencode
(opencode.ai/docs/skills: name ^[a-z0-9]+(-[a-z0-9]+)*$, 1-64, equal to its folder's
name; description 1-1024). The installer puts each in a folder named after it."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

import pytest
import tomllib
import yaml

from mcp_server.skill_files import (
    SKILLS_ROOT,
    frontmatter_problems,
    read_skill,
    shipped_skills,
)
from skills.shared.errors import ErrorCode, ToolFailure

OPENCODE_NAME = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
SKILL_PATHS = sorted(SKILLS_ROOT.glob("*/SKILL.md"))
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path", SKILL_PATHS, ids=lambda p: p.parent.name)
def test_every_skill_md_has_frontmatter_both_clients_accept(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\n"), "the frontmatter must be the file's first thing"
    meta = yaml.safe_load(text.split("---\n")[1])
    assert OPENCODE_NAME.match(meta["name"]) and len(meta["name"]) <= 64
    assert meta["name"].startswith("fsdp-eks-"), "our namespace: no clash in ~/.claude/skills"
    assert 1 <= len(meta["description"]) <= 1024
    assert "use it" in meta["description"].lower(), "the description says when to use it"
    assert frontmatter_problems(meta) == []
    assert read_skill(path).name == meta["name"]


def test_names_are_unique_and_a_workflow_skill_ships() -> None:
    names = [skill.name for skill in shipped_skills()]
    assert len(names) == len(set(names)) == len(SKILL_PATHS)
    assert "fsdp-eks-workflow" in names


def test_the_workflow_skill_names_every_error_code() -> None:
    workflow = next(s for s in shipped_skills() if s.name == "fsdp-eks-workflow").text
    missing = [code.value for code in ErrorCode if f"`{code.value}`" not in workflow]
    assert missing == []


def test_package_data_ships_every_skill_md() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["skills"]
    for path in SKILL_PATHS:
        relative = path.relative_to(SKILLS_ROOT).as_posix()
        assert any(fnmatch.fnmatch(relative, pattern) for pattern in globs), relative


@pytest.mark.parametrize(
    "meta, problem",
    [
        ({"name": "image_builder", "description": "x"}, "lowercase words"),
        ({"name": "-a", "description": "x"}, "lowercase words"),
        ({"name": "a--b", "description": "x"}, "lowercase words"),
        ({"name": "a" * 65, "description": "x"}, "lowercase words"),
        ({"name": "claude-helper", "description": "x"}, "reserved"),
        ({"name": "ok", "description": ""}, "description is missing"),
        ({"name": "ok", "description": "x" * 1025}, "1025 characters"),
        ({"name": "ok", "description": "a <tag> here"}, "XML tag"),
        (["not", "a", "mapping"], "not a YAML mapping"),
    ],
)
def test_frontmatter_problems_names_each_rule(meta: object, problem: str) -> None:
    assert any(problem in p for p in frontmatter_problems(meta))


def test_a_skill_without_frontmatter_is_a_typed_error(tmp_path: Path) -> None:
    bad = tmp_path / "pkg" / "SKILL.md"
    bad.parent.mkdir()
    bad.write_text("# pkg\nno frontmatter\n")
    with pytest.raises(ToolFailure) as caught:
        shipped_skills(tmp_path)
    assert caught.value.code == ErrorCode.INTERNAL_ERROR


# This repository's files: a user's project has none of them (issue 32).
_REPO_FILES = re.compile(
    r"[\w./-]+\.py\b|\b(commands|skills|tests|trainer|mcp_server|benchmarks)/|README|"
    r"job_spec|Makefile|pyproject"
)
_TOOLISH = re.compile(
    r"^(build|push|setup|start|get|list|deploy|delete|cancel|diagnose|inspect|manage)_[a-z_]+$"
)


@pytest.mark.parametrize("skill", shipped_skills(), ids=lambda s: s.name)
def test_installed_skills_speak_of_tools_not_this_repositorys_files(skill) -> None:
    from commands import all_tools

    assert not _REPO_FILES.findall(skill.text), _REPO_FILES.findall(skill.text)
    tools = {spec.name for spec in all_tools()}
    arguments = {"build_id", "build_args", "build_failed"}  # an argument, an error code
    named = {w for w in re.findall(r"`([a-z_]+)", skill.text) if _TOOLISH.match(w)} - arguments
    assert named <= tools, named - tools
    assert named, "a skill names the tools it is about"


def test_every_tool_is_in_some_skill_and_contributor_notes_are_not_shipped() -> None:
    from commands import all_tools

    text = "\n".join(skill.text for skill in shipped_skills())
    missing = [spec.name for spec in all_tools() if f"`{spec.name}`" not in text]
    assert missing == []
    assert "fsdp-eks-tool-contract" not in {skill.name for skill in shipped_skills()}
    assert (ROOT / "docs" / "tool-contract.md").is_file()
