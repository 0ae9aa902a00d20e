"""The suite's top-level packages have generic names: another distribution in the same
environment that ships one of them is named at start (the installer's report, the
server's log), with the way out (issue 46 item 0)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from skills.shared.distribution import collision_warning, shared_packages


def _site(tmp_path: Path) -> Path:
    """A site folder: a distribution shipping trainer/ (top_level.txt), one shipping
    skills/ (RECORD only), the suite itself (never a collision) and an unrelated one."""
    site = tmp_path / "site"
    dists = {
        "other_ml-1.0": ("other-ml", "top_level.txt", "trainer\n"),
        "agent_kit-2.0": ("agent_kit", "RECORD", "skills/__init__.py,,\nskills/x.py,,\n"),
        "fsdp_eks-0.1.0": ("fsdp-eks", "top_level.txt", "trainer\nskills\n"),
        "numpyish-1.0": ("numpyish", "top_level.txt", "numpyish\n"),
    }
    for folder, (name, file, text) in dists.items():
        info = site / f"{folder}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1\n")
        (info / file).write_text(text)
    return site


def test_another_distribution_shipping_our_package_is_named(tmp_path):
    dists = list(metadata.distributions(path=[str(_site(tmp_path))]))
    assert shared_packages(dists) == {"skills": ["agent_kit"], "trainer": ["other-ml"]}
    warning = collision_warning(dists)
    assert warning is not None
    assert "trainer/ by other-ml" in warning and "uv tool install" in warning


def test_an_environment_of_its_own_is_quiet(tmp_path):
    only_ours = _site(tmp_path)
    for info in only_ours.iterdir():
        if not info.name.startswith("fsdp_eks"):
            for file in info.iterdir():
                file.unlink()
            info.rmdir()
    assert collision_warning(metadata.distributions(path=[str(only_ours)])) is None


def test_the_installer_says_so(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(_site(tmp_path))}
    project = tmp_path / "project"
    project.mkdir()
    done = subprocess.run(
        [sys.executable, "-P", "-m", "mcp_server", "install", "--client", "claude"]
        + ["--dir", str(project), "--dry_run", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    warnings = json.loads(done.stdout)["warnings"]
    assert any("trainer/ by other-ml" in warning for warning in warnings), warnings
