"""The trainer's rules the tools share (trainer/rules.py) and every trainer module the
tools may import (the import contract's list in pyproject.toml) import no torch: the
tools run where torch is not installed, and a torch import costs seconds of start-up."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = "The tools import only the trainer's torch-free modules"


def tool_importable_modules() -> list[str]:
    """The trainer modules the contract lets the tools import (its ignore_imports)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (contract,) = [c for c in config["contracts"] if c["name"].startswith(CONTRACT)]
    return [line.split("->")[1].strip() for line in contract["ignore_imports"]]


def test_the_contract_lets_the_tools_import_the_rules_module():
    assert "trainer.rules" in tool_importable_modules()


@pytest.mark.parametrize("module", tool_importable_modules())
def test_a_module_the_tools_import_imports_no_torch(module):
    code = (
        f"import json, sys; import {module}; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [], f"{module} imports torch"
