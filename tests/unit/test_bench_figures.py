"""Every benchmark figure in the Markdown is rendered from benchmarks/results/, never typed by hand:
the marked blocks and benchmarks/summary.md equal their rendering from the committed results. And
every name the benchmarks import from the product exists (they import it inside functions)."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from benchmarks import harness, run_all

FIGURE = re.compile(r"\d[\d,.]*\s?(x|×|%|MB/s|MB|GB|GiB|s/step|tokens/s|examples/s|pages/s)(?![\w/])")
"""A number with a benchmark unit, as a hand-typed figure would be written."""


def test_every_figures_block_and_the_summary_equal_their_rendering_from_the_committed_results():
    stale = run_all.stale()
    assert not stale, (
        f"figures differ from benchmarks/results/ in {stale}: run python benchmarks/run_all.py --summary-only"
    )


def test_a_changed_result_makes_its_block_stale(tmp_path):
    shutil.copytree(harness.RESULTS, tmp_path, dirs_exist_ok=True)
    text = "before\n<!-- figures: train_step -->\n<!-- /figures -->\nafter\n"
    rendered = run_all.render_markdown(text, tmp_path)
    assert "**2.54x**" in rendered and rendered.startswith("before\n") and rendered.endswith("after\n")
    assert run_all.render_markdown(rendered, tmp_path) == rendered  # rendering is idempotent
    result = json.loads((tmp_path / "train_step.json").read_text())
    result["runs"][0]["speedup_vs_transformers_collator"] = 1.5
    (tmp_path / "train_step.json").write_text(json.dumps(result))
    assert "**1.50x**" in run_all.render_markdown(rendered, tmp_path)
    assert run_all.render_markdown(rendered.replace("2.54x", "2.60x"), harness.RESULTS) == rendered


def test_a_block_naming_no_benchmark_or_no_table_is_refused():
    with pytest.raises(ValueError, match="no benchmark named 'speed'"):
        run_all.render_markdown("<!-- figures: speed -->\n<!-- /figures -->\n")
    with pytest.raises(ValueError, match="has no table 'nothing'"):
        run_all.render_markdown("<!-- figures: batching.nothing -->\n<!-- /figures -->\n")


def test_a_benchmark_without_results_says_it_was_not_measured(tmp_path):
    rendered = run_all.render_markdown("<!-- figures: reader -->\n<!-- /figures -->\n", tmp_path)
    assert "**not measured**" in rendered and "run_all.py --only reader" in rendered


def test_every_results_file_is_rendered_by_its_benchmark():
    unrendered = {p.stem for p in harness.RESULTS.glob("*.json")} - set(run_all.RENDERED)
    assert not unrendered, f"results no benchmark renders: {sorted(unrendered)}"


def test_the_benchmarks_readme_types_no_figure_outside_its_blocks():
    text = run_all.BLOCK.sub("", (harness.ROOT / "benchmarks" / "README.md").read_text())
    typed = [m[0] for m in FIGURE.finditer(text)]
    assert not typed, f"figures typed by hand in benchmarks/README.md: {typed}"


def _defined(path) -> set[str]:
    """The names a module defines or imports at its top level."""
    import ast

    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return names


def test_every_product_name_a_benchmark_imports_exists():
    import ast

    from benchmarks.function_lengths import PACKAGES, project_files

    modules, missing = project_files(), []
    for script in sorted((harness.ROOT / "benchmarks").glob("*.py")):
        for node in ast.walk(ast.parse(script.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in PACKAGES:
                if node.module not in modules:
                    missing.append(f"{script.name}: no module {node.module}")
                    continue
                names = _defined(modules[node.module])
                missing += [
                    f"{script.name}: {node.module}.{alias.name}"
                    for alias in node.names
                    if alias.name not in names and f"{node.module}.{alias.name}" not in modules
                ]
    assert not missing, f"benchmarks import names the product no longer has: {missing}"
