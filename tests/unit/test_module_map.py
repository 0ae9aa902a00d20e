"""tests/README.md is the map tests/module_map.py writes from the tests' imports: stale
(a test or a module added, an import changed), this fails with the command to run."""

from __future__ import annotations

from tests import module_map


def test_the_tests_readme_is_the_map_the_imports_give():
    written = module_map.README.read_text() if module_map.README.exists() else ""
    assert written == module_map.render(), (
        f"tests/README.md is stale: run `{module_map.COMMAND}` and commit it"
    )


def test_every_production_module_is_in_the_map():
    text = module_map.render()
    for path in module_map.production_modules().values():
        assert f"- `{path.relative_to(module_map.ROOT)}`: " in text
