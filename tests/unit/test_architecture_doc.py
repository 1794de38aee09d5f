"""docs/architecture.md is true today: it names every module of the product code, its import
arrows are exactly the imports between packages, and its framework lines say exactly which
packages (and modules) import torch, Beam and fsspec (`tests/unit/test_structure.py` keeps the
rules)."""

from __future__ import annotations

import re
from pathlib import Path

from benchmarks.function_lengths import import_graph, project_files

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
ARROW = re.compile(r"^- `(\w+)` → (.+)$", re.MULTILINE)
FRAMEWORK = re.compile(r"^- `([\w.]+)`: (.+)$", re.MULTILINE)


def _section(title: str) -> str:
    return DOC.read_text(encoding="utf-8").split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_every_module_is_named():
    text = _section("Modules")
    root = Path(__file__).resolve().parents[2]
    missing = [
        str(path.relative_to(root))
        for path in project_files().values()
        if path.name != "__main__.py"
        and f"`{path.relative_to(root)}`" not in text
        and not (path.name == "__init__.py" and path.stat().st_size < 400)
    ]
    assert not missing, f"modules docs/architecture.md does not name: {missing}"
    named = set(re.findall(r"`((?:\w+/)+\w+\.py)`", text))
    gone = [name for name in named if not (root / name).exists()]
    assert not gone, f"docs/architecture.md names modules that do not exist: {gone}"


def test_each_arrow_is_an_import_and_each_import_an_arrow():
    drawn = {
        (source, target)
        for source, targets in ARROW.findall(_section("Imports"))
        for target in re.findall(r"`(\w+)`", targets)
    }
    actual = {
        (module.split(".")[0], name.split(".")[0])
        for module, names in import_graph().items()
        for name in names
        if module.split(".")[0] != name.split(".")[0]
    }
    assert drawn - actual == set(), f"arrows with no import behind them: {sorted(drawn - actual)}"
    assert actual - drawn == set(), f"imports the page does not draw: {sorted(actual - drawn)}"


def _importers(framework: str) -> set[str]:
    """The product files that import ``framework`` (or a module under it), anywhere in them."""
    import ast

    from benchmarks.function_lengths import _imported

    root = Path(__file__).resolve().parents[2]
    return {
        str(path.relative_to(root))
        for module, path in project_files().items()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        for name in _imported(node, module, path.name == "__init__.py")
        if name == framework or name.startswith(f"{framework}.")
    }


def test_each_framework_is_imported_where_the_page_says():
    lines = FRAMEWORK.findall(_section("Frameworks"))
    assert {name for name, _ in lines} >= {"torch", "apache_beam", "fsspec"}
    for name, where in lines:
        files = _importers(name)
        packages = set(re.findall(r"`(\w+)`", where))
        assert {f.split("/")[0] for f in files} == packages, f"{name}: imported in {sorted(files)}"
        for package in packages:
            named = set(re.findall(rf"\b({package}/[\w/]+\.py)", where))
            found = {f for f in files if f.startswith(f"{package}/")}
            assert not named or found == named, (
                f"{name}: imported in {sorted(found)}, the page says {sorted(named)}"
            )
