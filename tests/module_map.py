"""Writes tests/README.md: each production module and the test files that import it,
read from the tests' imports (ast: at the top and inside functions alike), so the map
cannot drift from the code. tests/unit/test_module_map.py fails when it is stale.

    .venv/bin/python -m tests.module_map        # rewrite tests/README.md
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "tests" / "README.md"
PACKAGES = ("commands", "skills", "mcp_server", "trainer")
COMMAND = ".venv/bin/python -m tests.module_map"
SHOWN = 4
HEADER = f"""# Which tests cover which module

Generated from the tests' imports by `tests/module_map.py` (do not edit; run
`{COMMAND}` after adding a test or a module; `tests/unit/test_module_map.py` fails
while this file is stale). A module is listed under the test files that import it
directly, the most focused first (a test named after the module, then those importing
fewest modules), at most SHOWN of them and how many more; "-": no test imports it
(it is reached through the modules that use it). Paths are from `tests/`.
"""


def production_modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the four packages (packages by their
    __init__.py)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imported(path: Path, modules: dict[str, Path]) -> set[str]:
    """The production modules `path` imports: `import a.b`, `from a.b import c` (c a
    module when a.b.c is one, else a.b)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                names.add(child if child in modules else node.module)
    return {name for name in names if name in modules}


def test_files() -> list[Path]:
    return sorted(p for p in (ROOT / "tests").rglob("test_*.py") if ".venv" not in p.parts)


def _focus(module: str, test: str, breadth: int) -> tuple[bool, int, str]:
    """Sort key: a test named after the module first, then the narrower tests."""
    stem = module.rsplit(".", 1)[-1].lstrip("_")
    return (stem not in Path(test).stem, breadth, test)


def _shown(module: str, tests: list[tuple[str, int]]) -> str:
    if not tests:
        return "-"
    ordered = sorted(tests, key=lambda t: _focus(module, *t))
    names = ", ".join(t for t, _ in ordered[:SHOWN])
    more = len(ordered) - SHOWN
    return names + (f" (+{more} more)" if more > 0 else "")


def render() -> str:
    modules = production_modules()
    covered: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for test in test_files():
        names = imported(test, modules)
        for name in names:
            covered[name].append((str(test.relative_to(ROOT / "tests")), len(names)))
    lines = [HEADER]
    package = None
    for name, path in modules.items():
        top = name.split(".")[0]
        if top != package:
            package = top
            lines.append(f"\n## {top}/\n")
        lines.append(f"- `{path.relative_to(ROOT)}`: {_shown(name, covered.get(name, []))}")
    return "\n".join(lines) + "\n"


def main() -> int:
    README.write_text(render())
    print(f"wrote {README.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
