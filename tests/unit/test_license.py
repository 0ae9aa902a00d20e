"""The project's LICENSE file is the license pyproject.toml declares (issue 46: the
documents ship one, the project had none), and the built distribution carries it."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]
# sha256 of the Apache License 2.0 text as apache.org publishes it (LICENSE-2.0.txt).
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_the_license_file_is_the_license_pyproject_declares():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    text = (ROOT / "LICENSE").read_bytes()
    assert hashlib.sha256(text).hexdigest() == APACHE_2_0_SHA256  # the full text, unedited
    assert b"Apache License\n                           Version 2.0, January 2004" in text


def test_the_wheel_and_the_sdist_carry_the_license_file(tmp_path):
    """setuptools' own metadata step (what `pip install` and `python -m build` run): the
    wheel's dist-info holds licenses/LICENSE and names it, the sdist's manifest lists it."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
         "print(b.prepare_metadata_for_build_wheel(sys.argv[1]))", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    dist_info = tmp_path / done.stdout.strip().splitlines()[-1]
    metadata = (dist_info / "METADATA").read_text()
    assert "License-Expression: Apache-2.0" in metadata
    assert "License-File: LICENSE" in metadata
    assert (dist_info / "licenses" / "LICENSE").read_bytes() == (ROOT / "LICENSE").read_bytes()
    sources = (tmp_path / "fsdp_eks.egg-info" / "SOURCES.txt").read_text().splitlines()
    assert "LICENSE" in sources
