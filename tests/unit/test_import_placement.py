"""tests/import_placement.py: the project's own imports at the top, the listed few excused."""

from __future__ import annotations

import pytest

from tests import import_placement as placement

ALLOWED = {("skills/a.py", "skills.b"): "a cycle, said why"}
SPLIT = ("skills/moving/", "trainer/one.py")
# The imports the entries above excuse (an entry that excuses nothing is reported).
EXCUSED = [
    ("skills/a.py", "def f():\n    from skills.b import c\n"),
    ("skills/moving/y.py", "def f():\n    import skills.c\n"),
    ("trainer/one.py", "def f():\n    import trainer.c\n"),
]


def _problems(path: str, source: str) -> list[str]:
    return placement.problems([*EXCUSED, (path, source)], ALLOWED, SPLIT)


CASES = {
    "a project import in a function body is reported, named by its module": (
        "skills/x.py",
        "def f():\n    from skills.kube import client\n",
        ["skills/x.py:2: imports skills.kube.client inside a function"],
    ),
    "a relative import in a method is reported": (
        "skills/x.py",
        "class C:\n    def m(self):\n        from .y import z\n",
        ["skills/x.py:3: imports .y inside a function"],
    ),
    "an import in a nested function is reported once": (
        "mcp_server/x.py",
        "def f():\n    def g():\n        import commands\n",
        ["mcp_server/x.py:3: imports commands inside a function"],
    ),
    "from a module import a name: the module is named": (
        "trainer/x.py",
        "def f():\n    from trainer.config import ConfigError\n",
        ["trainer/x.py:2: imports trainer.config inside a function"],
    ),
    "a heavy SDK may load in a function (ruff TID253 keeps it off the top)": (
        "skills/x.py",
        "def f():\n    import boto3\n    from kubernetes import client\n",
        [],
    ),
    "module-level imports, TYPE_CHECKING ones too, are at the top": (
        "skills/x.py",
        "from typing import TYPE_CHECKING\nfrom skills import y\n"
        "if TYPE_CHECKING:\n    from skills.z import Z\n",
        [],
    ),
    "an import listed in ALLOWED is excused, others in its file are not": (
        "skills/a.py",
        "def f():\n    from skills.b import c\n\ndef g():\n    from skills.d import e\n",
        ["skills/a.py:5: imports skills.d inside a function"],
    ),
    "a file under a folder being split is excused": (
        "skills/moving/deep/x.py",
        "def f():\n    from skills.kube import client\n",
        [],
    ),
    "a file being split is excused, its neighbour is not": (
        "trainer/one_more.py",
        "def f():\n    from trainer import config\n",
        ["trainer/one_more.py:2: imports trainer.config inside a function"],
    ),
}


@pytest.mark.parametrize(("path", "source", "reported"), CASES.values(), ids=CASES.keys())
def test_function_body_imports(path: str, source: str, reported: list[str]) -> None:
    assert _problems(path, source) == reported


def test_an_allowed_entry_that_matches_no_import_is_reported_stale() -> None:
    files = [("skills/a.py", "from skills.b import c\n")]
    assert placement.problems(files, ALLOWED, split=()) == [
        "skills/a.py: ALLOWED lists skills.b, which it no longer imports in a function: "
        "remove the entry"
    ]


def test_a_split_entry_that_excuses_nothing_is_reported_stale() -> None:
    files = [("skills/moving/y.py", "import skills.c\n")]
    assert placement.problems(files, {}, split=("skills/moving/",)) == [
        "skills/moving/: SPLIT_IN_PROGRESS lists it, and it imports nothing in a function: "
        "remove the entry"
    ]


def test_from_a_package_import_its_submodule_names_the_submodule() -> None:
    source = "def f():\n    from trainer import families\n    from skills.operations import x\n"
    found = [f.module for f in placement.function_body_imports(source, "trainer/hf_config.py")]
    assert found == ["trainer.families", "skills.operations"]


def test_every_exception_says_why() -> None:
    reasons = [*placement.ALLOWED.values(), *placement.SPLIT_IN_PROGRESS.values()]
    assert all(len(reason) > 20 for reason in reasons)


def test_the_production_code_passes_the_check() -> None:
    files = [(path, file.read_text()) for path, file in placement.production_files(placement.ROOT)]
    assert placement.problems(files) == []
