"""This suite as an installed distribution: its top-level packages are generic names
(`trainer`, `skills`, `commands`, `mcp_server`), so another distribution in the same
environment that ships one of them overwrites its files (and is overwritten). Its own
environment (`uv tool install`, `pipx install`) avoids that; this says so when not."""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import metadata

DISTRIBUTION = "fsdp-eks"
PACKAGES = frozenset({"commands", "mcp_server", "skills", "trainer"})


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _top_levels(dist: metadata.Distribution) -> set[str]:
    """The distribution's top-level names: its top_level.txt, else the first parts of the
    paths in its RECORD (what importlib.metadata.packages_distributions reads; the text
    scanned as is, ten times faster than Distribution.files)."""
    declared = (dist.read_text("top_level.txt") or "").split()
    if declared:
        return set(declared)
    record = dist.read_text("RECORD") or ""
    return {
        line.split(",", 1)[0].split("/", 1)[0].removesuffix(".py") for line in record.splitlines()
    }


def shared_packages(
    dists: Iterable[metadata.Distribution] | None = None,
) -> dict[str, list[str]]:
    """{our package: [the other distributions that ship it]}; empty when none does."""
    shared: dict[str, set[str]] = {}
    for dist in metadata.distributions() if dists is None else dists:
        ours = _top_levels(dist) & PACKAGES
        name = (dist.metadata["Name"] or "?") if ours else ""  # (parsing it is the slow part)
        if ours and _canonical(name) != DISTRIBUTION:
            for package in ours:
                shared.setdefault(package, set()).add(name)
    return {package: sorted(names) for package, names in sorted(shared.items())}


def collision_warning(dists: Iterable[metadata.Distribution] | None = None) -> str | None:
    """One line for a person when another distribution ships one of our packages."""
    shared = shared_packages(dists)
    if not shared:
        return None
    which = "; ".join(f"{package}/ by {', '.join(names)}" for package, names in shared.items())
    return (
        f"{DISTRIBUTION}: this environment also has {which}: installed together they "
        "overwrite each other's files. Install the suite in its own environment: "
        "uv tool install <checkout or git URL> (or pipx install)."
    )
