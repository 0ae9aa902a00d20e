"""Dependency floors that a feature needs, against the release that brought it."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())

# package -> (first release with the feature, the feature, where that was read)
FLOORS = [
    (
        "boto3",
        "1.34.41",
        "EKS Pod Identity credentials (the container provider reads the agent's token)",
        "docs.aws.amazon.com/eks/latest/userguide/pod-id-minimum-sdk.html, read 2026-12-06",
    ),
]


def _requirements(where: str) -> list[Requirement]:
    project = PYPROJECT["project"]
    names = project["dependencies"] if where == "tools" else project["optional-dependencies"][where]
    return [Requirement(r) for r in names]


@pytest.mark.parametrize("where", ["tools", "trainer"])
@pytest.mark.parametrize(("package", "first", "feature", "source"), FLOORS)
def test_a_floor_admits_no_release_without_the_feature(where, package, first, feature, source):
    (req,) = [r for r in _requirements(where) if r.name == package]
    major, minor, patch = (int(p) for p in first.split("."))
    assert req.specifier.contains(first), (feature, source)
    assert not req.specifier.contains(f"{major}.{minor}.{patch - 1}"), (feature, source)
