"""Time the corpus stages on real data and compare with WikiExtractor in the same run.

    python benchmarks/corpus.py [--wiki DUMP.xml.bz2] [--books 'DIR/*.txt'] [--wikiextractor PYTHON]

Per-core rates come from the stage functions run in this one process (pages/s and MB/s of
raw input); the end-to-end wall time of each ``pipelines`` command on Beam's in-process runner
is reported beside them. WikiExtractor (AGPL) is run as a separate program, never imported:
pass the Python of a virtual environment where it is installed (``make bench`` makes one).
Its CPU time is that of its processes, measured with ``getrusage``. A markup-leak rate (output
lines with wiki markup per 1,000 lines) compares how clean each output is.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipelines.books.pipeline import book_outcome
from pipelines.corpus.dedup import minhash_signature
from pipelines.wiki.dump import iter_pages
from pipelines.wiki.pipeline import page_outcome

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DEFAULT_WIKI = SHARED / "wiki" / "gensim_enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
DEFAULT_BOOKS = str(SHARED / "books" / "gutenberg" / "*.txt")
RESULTS = Path(__file__).resolve().parent / "results" / "corpus.json"
LEAK = re.compile(r"\{\{|\}\}|\[\[|\]\]|<ref|\{\||\|\}|&nbsp;|thumb\||^[=*#|!:;]|Category:|File:")


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def leak_rate(lines: list[str]) -> float:
    """Output lines containing wiki markup, per 1,000 non-empty lines."""
    lines = [line for line in lines if line.strip()]
    return 1000.0 * sum(bool(LEAK.search(line)) for line in lines) / max(1, len(lines))


def bench_wikipedia(dump: Path) -> dict:
    """Read, clean and split every page of a dump in this process."""
    xml_bytes = 0
    start_cpu, start = _cpu_s(), time.perf_counter()
    pages = documents = 0
    sentences: list[str] = []
    with open(dump, "rb") as f:
        for page in iter_pages(f):
            pages += 1
            xml_bytes += len(page.text.encode("utf-8"))
            outcome = page_outcome(page, str(dump), min_document_words=8)
            if outcome.kind == "document":
                documents += 1
                sentences.extend(outcome.row["sentences"])
    cpu, wall = _cpu_s() - start_cpu, time.perf_counter() - start
    return {
        "pages": pages,
        "documents": documents,
        "wikitext_mb": xml_bytes / 1e6,
        "compressed_mb": dump.stat().st_size / 1e6,
        "cpu_s": cpu,
        "wall_s": wall,
        "pages_per_s_per_core": pages / cpu,
        "wikitext_mb_per_s_per_core": xml_bytes / 1e6 / cpu,
        "leak_per_1000_lines": leak_rate(sentences),
    }


def bench_wikiextractor(python: str, dump: Path) -> dict:
    """Run WikiExtractor (one extraction process) on the dump as a separate program."""
    with tempfile.TemporaryDirectory() as out:
        before_cpu, start = _children_cpu_s(), time.perf_counter()
        subprocess.run(
            [python, "-m", "wikiextractor.WikiExtractor", str(dump), "-o", out, "--processes", "1", "-q"],
            check=True,
            capture_output=True,
        )
        cpu, wall = _children_cpu_s() - before_cpu, time.perf_counter() - start
        lines = []
        for path in sorted(Path(out).rglob("wiki_*")):
            lines.extend(
                line
                for line in path.read_text(encoding="utf-8").splitlines()
                if not line.startswith(("<doc", "</doc"))
            )
    return {"cpu_s": cpu, "wall_s": wall, "leak_per_1000_lines": leak_rate(lines), "lines": len(lines)}


def bench_books(pattern: str) -> dict:
    """Decode, clean and split every book in this process."""
    files = sorted(glob.glob(pattern))
    total_bytes = sum(os.path.getsize(f) for f in files)
    start_cpu, start = _cpu_s(), time.perf_counter()
    documents = [book_outcome(f, Path(f).read_bytes(), 100) for f in files]
    cpu, wall = _cpu_s() - start_cpu, time.perf_counter() - start
    rows = [o.row for o in documents if o.kind == "document"]
    start_cpu = _cpu_s()
    for row in rows:
        minhash_signature(row["sentences"], 5, 120)
    minhash_cpu = _cpu_s() - start_cpu
    return {
        "books": len(files),
        "mb": total_bytes / 1e6,
        "cpu_s": cpu,
        "wall_s": wall,
        "books_per_s_per_core": len(files) / cpu,
        "mb_per_s_per_core": total_bytes / 1e6 / cpu,
        "minhash_mb_per_s_per_core": total_bytes / 1e6 / minhash_cpu,
    }


def bench_commands(dump: Path, books: str) -> dict:
    """Wall time of the three commands on Beam's in-process runner (one worker)."""
    timings = {}
    with tempfile.TemporaryDirectory() as tmp:
        commands = {
            "wikipedia": ["wikipedia", "--input", str(dump), "--output", f"{tmp}/wiki"],
            "books": ["books", "--input", books, "--output", f"{tmp}/books"],
            "corpus": [
                "corpus",
                "--input",
                f"{tmp}/wiki",
                "--input",
                f"{tmp}/books",
                "--output",
                f"{tmp}/all",
            ],
        }
        for name, args in commands.items():
            start = time.perf_counter()
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pipelines.cli",
                    *args,
                    "--num-shards",
                    "4",
                    "--runner",
                    "FnApiRunner",
                ],
                check=True,
                capture_output=True,
            )
            timings[f"{name}_wall_s"] = time.perf_counter() - start
    return timings


def median_run(bench, repeats: int, *args) -> dict:
    """Run a benchmark ``repeats`` times and keep the run with the median CPU time."""
    runs = sorted((bench(*args) for _ in range(repeats)), key=lambda r: r["cpu_s"])
    result = runs[len(runs) // 2]
    result["cpu_s_runs"] = [round(r["cpu_s"], 3) for r in runs]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wiki", type=Path, default=DEFAULT_WIKI, help="a pages-articles dump (.xml.bz2)")
    parser.add_argument("--books", default=DEFAULT_BOOKS, help="a glob of plain-text books")
    parser.add_argument(
        "--wikiextractor", help="Python of a virtual environment with wikiextractor installed"
    )
    parser.add_argument("--skip-commands", action="store_true", help="only the per-core stage timings")
    parser.add_argument("--repeats", type=int, default=3, help="runs per timing; the median is kept")
    args = parser.parse_args()
    if not args.wiki.exists():
        print(f"benchmark input missing: {args.wiki} (pass --wiki, or run 'make bench')", file=sys.stderr)
        return 2
    results: dict = {"wikipedia": median_run(bench_wikipedia, args.repeats, args.wiki)}
    wiki = results["wikipedia"]
    print(
        f"wikipedia: {wiki['pages']} pages, {wiki['wikitext_mb']:.2f} MB wikitext, "
        f"{wiki['pages_per_s_per_core']:.1f} pages/s/core, {wiki['wikitext_mb_per_s_per_core']:.2f} MB/s/core, "
        f"markup leaks {wiki['leak_per_1000_lines']:.2f}/1000 sentences"
    )
    if args.wikiextractor:
        peer = results["wikiextractor"] = median_run(
            bench_wikiextractor, args.repeats, args.wikiextractor, args.wiki
        )
        ratio = peer["cpu_s"] / wiki["cpu_s"]
        results["speed_ratio_vs_wikiextractor"] = ratio
        print(
            f"wikiextractor: {peer['cpu_s']:.2f} s CPU ({wiki['wikitext_mb'] / peer['cpu_s']:.2f} MB/s/core), "
            f"markup leaks {peer['leak_per_1000_lines']:.2f}/1000 lines; "
            f"ours/theirs speed per core: {ratio:.2f}x"
        )
    else:
        print(
            "wikiextractor: skipped (pass --wikiextractor PYTHON; 'make bench' installs it in its own venv)"
        )
    if glob.glob(args.books):
        books = results["books"] = median_run(bench_books, args.repeats, args.books)
        print(
            f"books: {books['books']} books, {books['mb']:.2f} MB, {books['mb_per_s_per_core']:.2f} MB/s/core "
            f"({books['books_per_s_per_core']:.2f} books/s/core); MinHash {books['minhash_mb_per_s_per_core']:.2f} MB/s/core"
        )
        if not args.skip_commands:
            results["commands"] = bench_commands(args.wiki, args.books)
            print(
                "commands (wall, FnApiRunner, 1 worker): "
                + ", ".join(f"{k} {v:.1f} s" for k, v in results["commands"].items())
            )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
