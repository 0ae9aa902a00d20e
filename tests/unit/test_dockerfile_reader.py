"""The one Dockerfile reader (dockerfile-parse) and registry_check's rewrite on top of it:
ARG substitution, multi-stage aliases, `FROM --platform`, continuations."""

from __future__ import annotations

from skills.image_builder import dockerfile_reader, dockerfile_stages
from skills.image_builder.registry_check import rewrite_from

MULTI = """\
# syntax=docker/dockerfile:1
ARG REGISTRY=nvcr.io VERSION="24.05"
ARG BASE=${REGISTRY}/nvidia/pytorch:${VERSION}-py3
ARG RUNTIME
FROM --platform=$BUILDPLATFORM ${BASE} AS Builder
ARG VERSION
RUN echo $VERSION
FROM builder as test
FROM \\
    --platform=linux/amd64 \\
    ${RUNTIME:-ubuntu:22.04}
COPY --from=builder /x /x
FROM scratch AS empty
"""


def test_reader_resolves_global_args_stages_and_flags() -> None:
    froms = dockerfile_reader.read(MULTI).froms
    assert [f.image for f in froms] == [
        "nvcr.io/nvidia/pytorch:24.05-py3", "builder", "ubuntu:22.04", "scratch"]  # fmt: skip
    assert [f.name for f in froms] == ["builder", "test", None, "empty"]  # aliases lower case
    assert froms[0].flags == ("--platform=$BUILDPLATFORM",)
    assert froms[0].written == "${BASE}" and froms[0].line == 5
    assert froms[1].parent == 0 and froms[1].is_stage_ref  # "FROM builder": no pull
    assert (froms[2].line, froms[2].end_line, froms[2].flags) == (
        9,
        11,
        ("--platform=linux/amd64",),
    )
    assert froms[3].is_stage_ref and not froms[2].is_stage_ref


def test_build_args_override_only_declared_global_args() -> None:
    reading = dockerfile_reader.read(MULTI, {"VERSION": "25.01", "RUNTIME": "debian:12"})
    assert reading.froms[0].image == "nvcr.io/nvidia/pytorch:25.01-py3"
    assert reading.froms[2].image == "debian:12"
    assert reading.arg_lines["REGISTRY"] == (2, "nvcr.io")
    undeclared = dockerfile_reader.read("FROM ${X:-alpine:3}\n", {"X": "ignored"})
    assert undeclared.froms[0].image == "alpine:3"


def test_analyzer_and_registry_check_read_the_same_stages() -> None:
    parsed = dockerfile_stages.parse(MULTI)
    reading = dockerfile_reader.read(MULTI)
    assert [s.image for s in parsed.stages] == [f.image for f in reading.froms]
    assert [s.name for s in parsed.stages] == [f.name for f in reading.froms]
    _, pulled = rewrite_from(MULTI, None)
    assert [image for image, _ in pulled] == [f.image for f in reading.froms if not f.is_stage_ref]


def test_rewrite_through_a_mirror_edits_only_the_image_token() -> None:
    text, pulled = rewrite_from(MULTI, "localhost:5000/hub")
    assert pulled == [
        ("nvcr.io/nvidia/pytorch:24.05-py3", "nvcr.io/nvidia/pytorch:24.05-py3"),
        ("ubuntu:22.04", "localhost:5000/hub/library/ubuntu:22.04"),
    ]
    lines = text.split("\n")
    # nvcr.io is not Docker Hub, but the ARG form is written out as what is pulled
    assert lines[4] == (
        "FROM --platform=$BUILDPLATFORM nvcr.io/nvidia/pytorch:24.05-py3 AS Builder"
    )
    assert lines[7] == "FROM builder as test"  # a stage: untouched
    assert lines[8:11] == [
        "FROM \\",
        "    --platform=linux/amd64 \\",
        "    localhost:5000/hub/library/ubuntu:22.04",
    ]
    assert lines[12] == "FROM scratch AS empty"
    assert text.endswith("\n") and len(lines) == len(MULTI.split("\n"))


def test_base_image_replaces_the_last_from_even_scratch() -> None:
    text, pulled = rewrite_from(MULTI, None, base_image="pytorch/pytorch:2.4.0")
    assert pulled[-1] == ("pytorch/pytorch:2.4.0", "pytorch/pytorch:2.4.0")
    assert text.split("\n")[12] == "FROM pytorch/pytorch:2.4.0 AS empty"


def test_alias_equal_to_image_name_rewrites_the_image_not_the_alias() -> None:
    text, _ = rewrite_from("FROM ubuntu AS ubuntu\nRUN true\n", "mirror:5000")
    assert text == "FROM mirror:5000/library/ubuntu:latest AS ubuntu\nRUN true\n"
