"""Run every benchmark, then render its figures into ``summary.md`` and the marked Markdown blocks.

    python benchmarks/run_all.py [--only NAME ...]     run the benchmarks (each its own process), render
    python benchmarks/run_all.py --summary-only        render from benchmarks/results/*.json only

Rendering reads the JSON files only: ``summary.md`` is every benchmark's ``rows(result)``, and in
README.md, docs/*.md and benchmarks/README.md each block ``<!-- figures: NAME -->`` (or
``NAME.TABLE``, one of the script's ``TABLES``) … ``<!-- /figures -->`` holds that benchmark's rows
(or table) and its conditions. ``gpu_check`` runs on a GPU machine (``gpu_check.sh``) and ``suite``
(the README's commands, timed) in a fresh clone, ``scale`` (every stage at three sizes), ``peers_at_scale``
(the peers on its inputs), ``vocab_memory`` (up to 30 M distinct words) and ``rehearsal_scale`` (the
Dataflow rehearsal on a scale input, root only) take hours and are run on their own; their JSON in
``results/`` is rendered like the others. tests/unit/test_bench_figures.py fails when
a block or summary.md differs from its rendering.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/NAME.py`
from benchmarks import harness

BENCHMARKS = (
    "corpus documents wikitext_speed sentence_segmentation tokenization wordpiece_train examples examples_memory reader "
    "train_step batching finetune_step"
).split()
RENDERED = [*BENCHMARKS, "gpu_check", "suite", "scale", "peers_at_scale", "vocab_memory", "rehearsal_scale"]
SUMMARY = harness.ROOT / "benchmarks" / "summary.md"
BLOCK = re.compile(r"(<!-- figures: ([\w.]+) -->\n)(.*?)(<!-- /figures -->)", re.DOTALL)


def markdown_files() -> list[Path]:
    """The Markdown files whose figure blocks are rendered."""
    root = harness.ROOT
    return [root / "README.md", *sorted((root / "docs").glob("*.md")), root / "benchmarks" / "README.md"]


def result(name: str, results: Path = harness.RESULTS) -> dict | None:
    path = results / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def not_measured(name: str) -> str:
    if name == "gpu_check":
        return importlib.import_module("benchmarks.gpu_check").NOT_MEASURED
    run = (
        f"python benchmarks/{name}.py"
        if name not in BENCHMARKS
        else f"python benchmarks/run_all.py --only {name}"
    )
    return f"{name}: **not measured** (no `results/{name}.json`); `{run}`"


def render_block(key: str, results: Path = harness.RESULTS) -> str:
    """The Markdown of block ``NAME`` (the rows) or ``NAME.TABLE`` (one of its tables)."""
    name, _, table = key.partition(".")
    if name not in RENDERED:
        raise ValueError(f"no benchmark named {name!r} (figures blocks name one of {', '.join(RENDERED)})")
    module = importlib.import_module(f"benchmarks.{name}")
    tables = getattr(module, "TABLES", {})
    if table and table not in tables:
        raise ValueError(f"benchmarks/{name}.py has no table {table!r}: {', '.join(tables)}")
    data = result(name, results)
    if data is None:
        return not_measured(name) + "\n"
    if table:
        lines = tables[table](data)
    else:
        lines = ["| measured | ours | peer | ratio |", "|---|---|---|---|"]
        lines += ["| " + " | ".join(row) + " |" for row in module.rows(data)]
    source = f"`benchmarks/results/{name}.json`"
    return "\n".join([*lines, "", f"From {source}; {harness.conditions(data)}."]) + "\n"


def render_markdown(text: str, results: Path = harness.RESULTS) -> str:
    """``text`` with every figures block filled from the results."""
    return BLOCK.sub(lambda m: m[1] + render_block(m[2], results) + m[4], text)


def render_summary(results: Path = harness.RESULTS) -> str:
    """The Markdown of ``summary.md`` (no times or dates of its own: the same JSON, the same text)."""
    lines = [
        "# Benchmark summary",
        "",
        "Rendered by `python benchmarks/run_all.py --summary-only` from `benchmarks/results/*.json`. Ratios",
        "are ours / the peer, measured in the same run of the same script (above 1: ours is faster); what",
        "each script measures and its peer are in [README.md](README.md), the conditions below the table.",
        "",
        "| benchmark | measured (input, size) | ours | peer | ratio |",
        "|---|---|---|---|---|",
    ]
    notes, conditions = [], []
    for name in RENDERED:
        data = result(name, results)
        if data is None:
            notes.append(f"* {not_measured(name)}")
            continue
        lines += [
            f"| {name} | " + " | ".join(row) + " |"
            for row in importlib.import_module(f"benchmarks.{name}").rows(data)
        ]
        conditions.append(f"* {name}: {harness.conditions(data)}.")
    lines += ["", "Conditions:", "", *conditions]
    if notes:
        lines += ["", "Not in the table:", "", *notes]
    return "\n".join(lines) + "\n"


def renderings(results: Path = harness.RESULTS) -> dict[Path, tuple[str, str]]:
    """Every file with figures: its text now, and its text rendered from ``results``."""
    found = {SUMMARY: (SUMMARY.read_text() if SUMMARY.exists() else "", render_summary(results))}
    for path in markdown_files():
        text = path.read_text()
        found[path] = (text, render_markdown(text, results))
    return found


def stale(results: Path = harness.RESULTS) -> list[str]:
    """The files whose figures differ from their rendering from ``results``."""
    return [str(path) for path, (text, rendered) in renderings(results).items() if text != rendered]


def main() -> int:
    parser = harness.parser(__doc__, None)
    parser.add_argument(
        "--only", action="append", choices=BENCHMARKS, metavar="NAME", help="run this one (repeatable)"
    )
    parser.add_argument("--summary-only", action="store_true", help="only render, from the existing JSON")
    args = parser.parse_args()
    failed = []
    for name in [] if args.summary_only else args.only or BENCHMARKS:
        print(f"== {name}", flush=True)
        start = time.perf_counter()
        status = subprocess.run([sys.executable, f"benchmarks/{name}.py"], cwd=harness.ROOT).returncode
        print(
            f"-- {name}: {'ok' if status == 0 else f'FAILED (exit status {status})'} in {time.perf_counter() - start:.0f} s"
        )
        failed += [name] if status else []
    for path, (text, rendered) in renderings().items():
        if text != rendered:
            path.write_text(rendered)
            print(f"rendered the figures of {path.relative_to(harness.ROOT)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
