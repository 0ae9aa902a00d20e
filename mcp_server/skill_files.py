"""The agent skills this project ships (skills/<package>/SKILL.md) and the rules both
clients hold them to: Claude Code and opencode load `<skills dir>/<name>/SKILL.md`
whose frontmatter `name` equals its folder's name (lowercase letters and digits in
single-hyphen-separated words, 1-64 characters; Anthropic also reserves "anthropic"
and "claude") and whose `description` says what it does and when to use it (1-1024
characters, no XML tags). The packages use underscores, so a skill's installed
folder is its frontmatter name, not its package's."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

import skills
from skills.shared.errors import ErrorCode, ToolFailure

SKILL_FILE = "SKILL.md"
NAME_PATTERN = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
NAME_MAX = 64
DESCRIPTION_MAX = 1024
RESERVED_WORDS = ("anthropic", "claude")
_XML_TAG = re.compile(r"<[A-Za-z/!?]")
_FRONTMATTER = re.compile(r"\A---\r?\n(.*?)\r?\n---\r?\n", re.DOTALL)
SKILLS_ROOT = Path(skills.__file__).resolve().parent


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    source: Path
    text: str


def frontmatter_problems(meta: object) -> list[str]:
    """Why a parsed frontmatter would not load in Claude Code or opencode (empty: it would)."""
    if not isinstance(meta, dict):
        return ["the frontmatter is not a YAML mapping"]
    problems = []
    name, description = meta.get("name"), meta.get("description")
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or len(name) > NAME_MAX:
        problems.append(f"name {name!r} is not 1-{NAME_MAX} lowercase words joined by '-'")
    elif any(word in name for word in RESERVED_WORDS):
        problems.append(f"name {name!r} holds a reserved word {RESERVED_WORDS}")
    if not isinstance(description, str) or not description.strip():
        problems.append("description is missing or empty")
    elif len(description) > DESCRIPTION_MAX:
        problems.append(f"description is {len(description)} characters (max {DESCRIPTION_MAX})")
    elif _XML_TAG.search(description):
        problems.append("description holds an XML tag")
    return problems


def read_skill(path: Path) -> Skill:
    """One SKILL.md, its frontmatter checked against both clients' rules."""
    text = path.read_text(encoding="utf-8")
    match = _FRONTMATTER.match(text)
    try:
        meta = yaml.safe_load(match[1]) if match else None
    except yaml.YAMLError as exc:
        meta, problems = None, [f"the frontmatter is not YAML: {exc}"]
    else:
        problems = frontmatter_problems(meta) if match else ["no '---' frontmatter at the top"]
    if problems or not isinstance(meta, dict):  # no problems means a mapping
        raise ToolFailure(
            ErrorCode.INTERNAL_ERROR,
            f"{path}: {'; '.join(problems) or 'the frontmatter is not a mapping'}",
            "Fix the skill's frontmatter (a packaging bug); tests/unit/test_skills_frontmatter.py "
            "checks every SKILL.md.",
        )
    return Skill(meta["name"], meta["description"], path, text)


def shipped_skills(root: Path = SKILLS_ROOT) -> list[Skill]:
    """Every skills/<folder>/SKILL.md, sorted by name; two with one name is a bug."""
    found = sorted((read_skill(p) for p in root.glob(f"*/{SKILL_FILE}")), key=lambda s: s.name)
    names = [skill.name for skill in found]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ToolFailure(ErrorCode.INTERNAL_ERROR, f"two skills share a name: {duplicates}")
    return found
