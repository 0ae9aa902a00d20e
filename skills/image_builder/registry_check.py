"""Base images before a build: which images a Dockerfile's FROM lines name, the same
text with Docker Hub names pulled through a mirror; whether a tag exists is
skills.cloud.registry_images' manifest request.

Mirror (`base_mirror` / FSDP_EKS_BASE_MIRROR): `HOST[:PORT][/PREFIX]`, e.g.
`localhost:5000` or an ECR pull-through cache
`<acct>.dkr.ecr.<region>.amazonaws.com/docker-hub`. A Docker Hub name is rewritten to
`<mirror>/<namespace>/<name>:<tag>`, official images with their `library/` namespace
(`ubuntu:22.04` -> `<mirror>/library/ubuntu:22.04`, as ECR's pull-through cache wants
them). Only the text sent to the daemon changes; the user's Dockerfile is not edited.
"""

from __future__ import annotations

import os
import re

from skills.cloud.registry_images import HOST_PATTERN, parse_image
from skills.image_builder import dockerfile_reader
from skills.shared.errors import ErrorCode, ToolFailure

MIRROR_ENV = "FSDP_EKS_BASE_MIRROR"
# HOST[:PORT][/PREFIX]: a registry host and an optional repository prefix.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
MIRROR_PATTERN = rf"^{HOST_PATTERN}(?:/{_COMPONENT})*$"
_FROM_KEYWORD = re.compile(r"^\s*FROM\b", re.IGNORECASE)


def mirrored(image: str, mirror: str | None) -> str:
    """`image` pulled through `mirror` when it is a Docker Hub name; else unchanged."""
    if not mirror:
        return image
    ref = parse_image(image)
    if not ref.on_docker_hub:
        return image
    suffix = f"@{ref.digest}" if ref.digest else f":{ref.tag}"
    return f"{mirror.rstrip('/')}/{ref.repository}{suffix}"


def rewrite_from(
    text: str,
    mirror: str | None,
    build_args: dict[str, str] | None = None,
    base_image: str | None = None,
) -> tuple[str, list[tuple[str, str]]]:
    """The text to send to the daemon: the last FROM's image replaced by `base_image`
    when given, and every pulled image through `mirror`. Returns (text, [(image as the
    Dockerfile names it, image as pulled)]). The FROMs are dockerfile_reader's (ARGs,
    stages, `--platform`, continuations); only the image token of a FROM is edited."""
    lines = text.split("\n")  # as dockerfile-parse numbers them
    froms = dockerfile_reader.read(text, build_args).froms
    pulled: list[tuple[str, str]] = []
    for entry in froms:
        image = entry.image
        if base_image and entry.index == len(froms) - 1:
            image = base_image
        elif entry.is_stage_ref:
            continue
        target = mirrored(image, mirror)
        pulled.append((image, target))
        if target != entry.written:
            _replace_image(lines, entry, target)
    return "\n".join(lines), pulled


def _replace_image(lines: list[str], entry: dockerfile_reader.FromInstruction, image: str) -> None:
    """`image` where the FROM writes its image: the first whole token equal to it after
    the FROM keyword (only flags, which start with --, come between)."""
    token = re.compile(rf"(?<!\S){re.escape(entry.written)}(?!\S)")
    for number in range(entry.line - 1, entry.end_line):
        body = lines[number]
        start = 0
        if number == entry.line - 1 and (keyword := _FROM_KEYWORD.match(body)):
            start = keyword.end()
        if hit := token.search(body, start):
            lines[number] = body[: hit.start()] + image + body[hit.end() :]
            return


def mirror_setting(given: str | None) -> str | None:
    """The tool input, else FSDP_EKS_BASE_MIRROR; checked against HOST[:PORT][/PREFIX]."""
    value = given or os.environ.get(MIRROR_ENV) or None
    if value is None:
        return None
    value = value.strip().removeprefix("https://").removeprefix("http://").rstrip("/")
    if not re.fullmatch(MIRROR_PATTERN, value):
        raise ToolFailure(
            ErrorCode.INVALID_INPUT,
            f"{MIRROR_ENV} is not a registry HOST[:PORT][/PREFIX].",
            "Set it like localhost:5000 or <acct>.dkr.ecr.<region>.amazonaws.com/docker-hub.",
            {"problems": [{"field": MIRROR_ENV, "problem": "not HOST[:PORT][/PREFIX]"}]},
        )
    return value
