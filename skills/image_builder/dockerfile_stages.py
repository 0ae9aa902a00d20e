"""A Dockerfile's stages as the analyzer reads them: the image each starts from (and
where that reference is written, so a fix edits that place), its instructions with its
ARG/ENV substituted as Docker would, and the stage it builds on."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from skills.image_builder import dockerfile_reader
from skills.image_builder.dockerfile_reader import assignments, substitute


@dataclass
class Instruction:
    kind: str
    line: int  # 1-based first line
    end_line: int
    raw: str  # as written (continuations included)
    value: str  # continuation-joined, ARG/ENV substituted


@dataclass
class ImageSource:
    """Where a stage's image reference is written, so a fix edits that place."""

    where: Literal["from", "arg", "build_arg", "override"]
    line: int | None
    raw: str  # the text to replace there
    arg: str | None = None


@dataclass
class Stage:
    index: int
    name: str | None
    from_line: int
    image: str  # resolved reference, or the stage name it builds on
    parent: Stage | None
    source: ImageSource
    instructions: list[Instruction] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # ENV as of the stage's last line

    @property
    def root(self) -> Stage:
        return self.parent.root if self.parent else self

    def chain(self) -> list[Stage]:
        return (self.parent.chain() if self.parent else []) + [self]


@dataclass
class Parsed:
    stages: list[Stage]
    global_args: dict[str, str]
    arg_lines: dict[str, tuple[int, str]]  # global ARG name -> (line, raw default)

    @property
    def final(self) -> Stage:
        return self.stages[-1]


def parse(
    text: str, *, build_args: dict[str, str] | None = None, base_image: str | None = None
) -> Parsed:
    build_args = dict(build_args or {})
    if base_image:
        build_args.setdefault("BASE_IMAGE", base_image)
    dockerfile = dockerfile_reader.read(text, build_args)
    global_args, arg_lines = dockerfile.global_args, dockerfile.arg_lines
    stages: list[Stage] = []
    for entry, items in zip(dockerfile.froms, dockerfile.stage_items, strict=True):
        parent = stages[entry.parent] if entry.parent is not None else None
        source = ImageSource("from", entry.line, entry.written)
        if m := re.fullmatch(r"\$\{?(\w+)\}?", entry.written):
            arg = m[1]
            if arg in build_args:
                source = ImageSource("build_arg", None, build_args[arg], arg)
            elif arg in arg_lines:
                source = ImageSource("arg", arg_lines[arg][0], arg_lines[arg][1], arg)
        stage = Stage(entry.index, entry.name, entry.line, entry.image, parent, source)
        stages.append(stage)
        _read_stage(stage, items, dict(parent_env(stages, parent)), build_args, global_args)
    if base_image and stages:
        final = stages[-1]
        if final.source.where == "from" and final.parent is None:
            final.image, final.source = base_image, ImageSource("override", None, base_image)
        elif final.source.where in ("arg", "build_arg") and final.parent is None:
            final.image = base_image
            final.source = ImageSource("override", None, base_image, final.source.arg)
    return Parsed(stages, global_args, arg_lines)


def _read_stage(
    stage: Stage,
    items: Sequence[Mapping[str, Any]],
    env: dict[str, str],
    build_args: dict[str, str],
    global_args: dict[str, str],
) -> None:
    """The stage's instructions with its ARG/ENV substituted as Docker would."""
    for item in items:
        kind, line, end = item["instruction"], item["startline"] + 1, item["endline"] + 1
        value = item["value"]
        if kind == "ARG":
            for arg, default in assignments(value):
                chosen = build_args.get(
                    arg, default if default is not None else global_args.get(arg)
                )
                if chosen is not None:
                    env[arg] = substitute(chosen, env)
        elif kind == "ENV":
            for key, val in assignments(value):
                if val is not None:
                    env[key] = substitute(val, env)
        if kind not in ("COMMENT",):
            stage.instructions.append(
                Instruction(kind, line, end, item["content"], substitute(value, env))
            )
            stage.env = dict(env)


def parent_env(stages: list[Stage], parent: Stage | None) -> dict[str, str]:
    return dict(parent.env) if parent else {}
