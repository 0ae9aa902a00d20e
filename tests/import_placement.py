"""The lint check that the project's own imports sit at the top of their module.

A function-body import of a project module hides a dependency from the reader and from
lint-imports' picture until the function runs; the honest place is the top. Ruff's
PLC0415 cannot tell the project's modules from the heavy SDKs, which do load lazily:
those are banned at module level instead (ruff TID253, [tool.ruff.lint] in
pyproject.toml), so each loads behind its one factory (skills/cloud/clients.py for boto3
and docker, skills/kube/access.py for kubernetes, plot.py for matplotlib). The few
function-body imports of project modules that stay are listed in ALLOWED with why;
`make lint` runs this, and a listed import that no longer exists fails too, so the
table cannot go stale.

    .venv/bin/python -m tests.import_placement
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("commands", "mcp_server", "skills", "trainer")

# Files another change is rewriting right now: their function-body imports are theirs to
# move. Remove an entry once that change has merged (the check then holds it too; an
# entry that excuses nothing is reported).
SPLIT_IN_PROGRESS: dict[str, str] = {}

# (file, imported module) -> why it stays in the function body.
ALLOWED: dict[tuple[str, str], str] = {
    ("mcp_server/server.py", "skills.operations.operations"): (
        "the operations store (sqlite3, psutil, filelock: ~0.2 s) loads with the first "
        "operation call, not at the server's start (benchmarks/mcp_cold_start.py)"
    ),
    ("commands/_cli.py", "skills.operations.operations"): (
        "the server imports commands._cli at start (through commands._old_names); the "
        "operations store loads only when a CLI call waits on an operation"
    ),
    ("mcp_server/__main__.py", "mcp_server.install"): (
        "the install subcommand's client configs and YAML stay off the server's start"
    ),
    ("trainer/hf_config.py", "trainer.families"): (
        "families imports torch and transformers: hf_config stays torch-free for the "
        "checks the tools run, and loads families only for a family other than Llama"
    ),
}


@dataclass(frozen=True)
class Found:
    path: str  # relative to the root, with forward slashes
    line: int
    module: str  # the imported module as written ("." prefixes for relative ones)

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: imports {self.module} inside a function"


def _imported(node: ast.Import | ast.ImportFrom, root: Path) -> list[str]:
    """The modules an import statement loads: `from pkg import mod` names pkg.mod when
    that is a module of the project, else pkg (`from pkg.mod import name`: pkg.mod)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    module = "." * node.level + (node.module or "")
    if node.level:
        return [module]
    names = []
    for alias in node.names:
        child = root.joinpath(*module.split("."), alias.name)
        is_module = child.with_suffix(".py").is_file() or child.is_dir()
        names.append(f"{module}.{alias.name}" if is_module else module)
    return list(dict.fromkeys(names))


def _is_project(module: str) -> bool:
    return module.startswith(".") or module.split(".")[0] in PACKAGES


def function_body_imports(source: str, path: str, root: Path = ROOT) -> Iterator[Found]:
    """Every project import inside a function (methods and nested functions included)
    of this module's source; module-level ones, `if TYPE_CHECKING:` blocks among them,
    are at the top."""
    seen: set[tuple[int, str]] = set()
    for function in ast.walk(ast.parse(source, filename=path)):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for module in _imported(node, root):
                    if _is_project(module) and (node.lineno, module) not in seen:
                        seen.add((node.lineno, module))
                        yield Found(path, node.lineno, module)


def production_files(root: Path) -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for file in sorted((root / package).rglob("*.py")):
            yield file.relative_to(root).as_posix(), file


def _split_in_progress(path: str, split: Iterable[str]) -> bool:
    return any(path == e or (e.endswith("/") and path.startswith(e)) for e in split)


def problems(
    files: Iterable[tuple[str, str]],
    allowed: dict[tuple[str, str], str] = ALLOWED,
    split: Iterable[str] = SPLIT_IN_PROGRESS,
) -> list[str]:
    """What the check reports for these (path, source) pairs: each function-body project
    import not excused, then each ALLOWED or SPLIT_IN_PROGRESS entry that excuses
    nothing (stale: the import moved, the split merged)."""
    split = tuple(split)
    found = [f for path, source in files for f in function_body_imports(source, path)]
    used = {(f.path, f.module) for f in found}
    excused = {(f.path, f.module) for f in found if _split_in_progress(f.path, split)}
    report = [str(f) for f in found if (f.path, f.module) not in {*allowed, *excused}]
    report += [
        f"{path}: ALLOWED lists {module}, which it no longer imports in a function: "
        "remove the entry"
        for path, module in allowed
        if (path, module) not in used
    ]
    report += [
        f"{entry}: SPLIT_IN_PROGRESS lists it, and it imports nothing in a function: "
        "remove the entry"
        for entry in split
        if not any(_split_in_progress(f.path, [entry]) for f in found)
    ]
    return report


def main() -> int:
    files = [(path, file.read_text()) for path, file in production_files(ROOT)]
    report = problems(files)
    for line in report:
        print(line)
    if report:
        print(
            f"{len(report)} problem(s): move the import to the top of its module, or list "
            "it in ALLOWED (tests/import_placement.py) with why it must stay.",
            file=sys.stderr,
        )
    return 1 if report else 0


if __name__ == "__main__":
    sys.exit(main())
