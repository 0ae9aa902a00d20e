"""The one reader of a Dockerfile's stages: dockerfile-parse for instructions,
continuations and comments; global ARGs (those before the first FROM, with build args
over their defaults) substituted into each FROM, as Docker does; `--platform` and other
flags kept apart; `AS name` aliases, and which stage a FROM builds on. The analyzer
(torch/CUDA findings) and registry_check (mirror rewrite) both read it."""

from __future__ import annotations

import io
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dockerfile_parse import DockerfileParser

from skills.shared.errors import ErrorCode, ToolFailure

# Real Dockerfiles are a few KiB with instructions of tens of lines.
MAX_DOCKERFILE_CHARS = 1024 * 1024
MAX_CONTINUATION_LINES = 2000
_VAR = re.compile(r"\$(?:\{(\w+)(?:(:?[-+])([^}]*))?\}|(\w+))")


def substitute(text: str, env: dict[str, str]) -> str:
    """Docker's ${VAR}, $VAR, ${VAR:-default}, ${VAR:+alt}; an unknown VAR is left as is."""

    def one(m: re.Match[str]) -> str:
        name = m[1] or m[4]
        value = env.get(name)
        if m[2] and m[2].endswith("-"):
            return value if value else substitute(m[3], env)
        if m[2] and m[2].endswith("+"):
            return substitute(m[3], env) if value else ""
        return value if value is not None else m[0]

    return _VAR.sub(one, text)


def assignments(value: str) -> list[tuple[str, str | None]]:
    """`A=1 B="x y"` / `NAME` / ENV's legacy `NAME value` -> [(name, value)]."""
    try:
        tokens = shlex.split(value)
    except ValueError:
        tokens = value.split()
    if len(tokens) >= 2 and "=" not in tokens[0]:
        return [(tokens[0], " ".join(tokens[1:]))]
    return [(t.split("=", 1)[0], t.split("=", 1)[1] if "=" in t else None) for t in tokens]


@dataclass(frozen=True)
class FromInstruction:
    index: int  # the stage's number, from 0
    line: int  # 1-based first line
    end_line: int  # 1-based last line (continuations)
    written: str  # the image as the file writes it ("${BASE}", "builder")
    image: str  # global ARGs substituted
    name: str | None  # the `AS name` alias, lower case (Docker's are case-insensitive)
    flags: tuple[str, ...]  # ("--platform=linux/amd64",)
    parent: int | None  # the earlier stage this one builds on, if its image names one

    @property
    def is_stage_ref(self) -> bool:
        """Nothing to pull: an earlier stage, or scratch."""
        return self.parent is not None or self.image.lower() == "scratch"


@dataclass
class Dockerfile:
    froms: list[FromInstruction]
    global_args: dict[str, str]  # name -> value FROM sees (build arg or default)
    arg_lines: dict[str, tuple[int, str]]  # global ARG with a default -> (line, default)
    # dockerfile-parse's items after each FROM (that stage's instructions, comments too)
    stage_items: list[list[Mapping[str, Any]]] = field(default_factory=list)


def _from_parts(value: str) -> tuple[tuple[str, ...], str, str | None]:
    tokens = value.split()
    flags = tuple(t for t in tokens if t.startswith("--"))
    rest = [t for t in tokens if not t.startswith("--")]
    name = rest[2] if len(rest) >= 3 and rest[1].lower() == "as" else None
    return flags, (rest[0] if rest else ""), name


def check_size(text: str) -> None:
    """ToolFailure(INVALID_INPUT) for a Dockerfile over the caps: the parser joins a
    continued instruction by repeated concatenation (quadratic in its lines), so both the
    whole text and the longest instruction are bounded before it runs. One linear pass."""
    problem = None
    if len(text) > MAX_DOCKERFILE_CHARS:
        problem = f"is larger than {MAX_DOCKERFILE_CHARS // 1024} KiB"
    else:
        run = longest = 0
        for line in text.splitlines():
            run = run + 1 if line.rstrip().endswith("\\") else 0
            longest = max(longest, run)
        if longest > MAX_CONTINUATION_LINES:
            problem = f"has an instruction continued over {longest} lines"
    if problem:
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"The Dockerfile {problem} (limits: {MAX_DOCKERFILE_CHARS // 1024} KiB, "
            f"{MAX_CONTINUATION_LINES} lines per instruction).",
            "Split the instruction, or move long lists into a requirements file.",
            {"problems": [{"field": "dockerfile", "problem": problem}]},
        )


def read(text: str, build_args: dict[str, str] | None = None) -> Dockerfile:
    """Every FROM with its image resolved, the global ARGs, and each stage's items."""
    check_size(text)
    build_args = build_args or {}
    parser = DockerfileParser(fileobj=io.StringIO(text), env_replace=False)
    read_: Dockerfile = Dockerfile([], {}, {})
    for item in parser.structure:
        kind, line = item["instruction"], item["startline"] + 1
        if kind == "FROM":
            flags, written, name = _from_parts(item["value"])
            image = substitute(written, read_.global_args)
            parent = next((f.index for f in read_.froms if f.name == image.lower()), None)
            read_.froms.append(
                FromInstruction(
                    len(read_.froms),
                    line,
                    item["endline"] + 1,
                    written,
                    image,
                    name.lower() if name else None,
                    flags,
                    parent,
                )
            )
            read_.stage_items.append([])
        elif read_.froms:
            read_.stage_items[-1].append(item)
        elif kind == "ARG":
            for arg, default in assignments(item["value"]):
                if default is not None:
                    read_.arg_lines[arg] = (line, default)
                chosen = build_args.get(arg, default)
                if chosen is not None:
                    read_.global_args[arg] = substitute(chosen, read_.global_args)
    return read_


__all__ = ["Dockerfile", "FromInstruction", "assignments", "read", "substitute"]
