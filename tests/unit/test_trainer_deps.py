"""The `trainer` extra is the one list of what the job imports at run time: the image
installs it and nothing else (Dockerfile), so a module that trainer/ imports and the extra
lacks is a ModuleNotFoundError in the pod (as boto3 was for s3:// checkpoints)."""

from __future__ import annotations

import ast
import re
import sys
from functools import cache
from importlib import metadata
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.split(r"[\[<>=!~ ;]", requirement, maxsplit=1)[0]).lower()


# Modules behind one flag, from an extra of their own (the flag is refused at start
# without them): module -> extra.
OPTIONAL = {"torchao": "float8", "wandb": "wandb"}


def trainer_extra(module: str = "") -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = OPTIONAL.get(module, "trainer")
    return {_name(r) for r in project["optional-dependencies"][extra]}


def _type_checking_only(tree: ast.Module) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:` (never run)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skipped


def run_time_imports(package: Path) -> dict[str, set[str]]:
    """{top-level module: files importing it} over every import, deferred ones included
    (`import boto3` inside a function), leaving out the stdlib and the package itself."""
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        skipped = _type_checking_only(tree)
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names and top not in ("__future__", package.name):
                    found.setdefault(top, set()).add(str(path.relative_to(package.parent)))
    return found


def test_the_scan_sees_a_deferred_import_and_skips_type_checking(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "m.py").write_text(
        "from typing import TYPE_CHECKING\nimport json\nfrom pkg import x\n"
        "if TYPE_CHECKING:\n    import onlytyped\n"
        "def f():\n    import deferred.sub  # only when called\n"
    )
    assert set(run_time_imports(package)) == {"deferred"}


TRAINER_IMPORTS = run_time_imports(ROOT / "trainer")


@cache
def _distributions() -> dict[str, list[str]]:
    return dict(metadata.packages_distributions())


def test_trainer_imports_what_its_run_time_needs():
    # The scan found the deferred ones that were missing from the image (issue 29).
    assert {"torch", "boto3", "yaml", "datasets", "safetensors", "tokenizers"} <= set(
        TRAINER_IMPORTS
    )


@pytest.mark.parametrize("module", sorted(TRAINER_IMPORTS))
def test_every_module_the_trainer_imports_comes_from_the_trainer_extra(module):
    providers = {_name(d) for d in _distributions().get(module, [])}
    assert providers, f"{module} (imported by {TRAINER_IMPORTS[module]}) is not installed here"
    assert providers & trainer_extra(module), (
        f"{module} is imported by {sorted(TRAINER_IMPORTS[module])} but none of "
        f"{sorted(providers)} is in pyproject's `trainer` extra, the list the image installs"
    )
