"""The corpus stages on real data per core, and WikiExtractor on the same dump in the same run.

    python benchmarks/corpus.py [--wiki DUMP.xml.bz2] [--books 'DIR/*.txt'] [--wikiextractor PYTHON]

Per-core rates of the stage functions run in this process (pages/s and MB/s of raw input; the run
with the median CPU time of ``--repeats``), and the wall time of each ``pipelines`` command on
Beam's in-process runner. WikiExtractor 3.1.0 (AGPL) runs as a separate program
(``--processes 1``), never imported, from its own venv (``.venv-wikiextractor``, made by ``make
bench``); its CPU time is that of all its processes. Markup leaks (output lines with wiki markup
per 1,000 lines) compare how clean each output is.
"""

from __future__ import annotations

import glob
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/NAME.py`
from benchmarks import harness
from benchmarks.harness import Row, n, x

LEAK = re.compile(r"\{\{|\}\}|\[\[|\]\]|<ref|\{\||\|\}|&nbsp;|thumb\||^[=*#|!:;]|Category:|File:")


def leak_rate(lines: list[str]) -> float:
    """Output lines containing wiki markup, per 1,000 non-empty lines."""
    lines = [line for line in lines if line.strip()]
    return 1000.0 * sum(bool(LEAK.search(line)) for line in lines) / max(1, len(lines))


def wikipedia(dump: Path) -> dict:
    """Read, clean and split every page of a dump in this process."""
    from pipelines.wiki.dump import iter_pages
    from pipelines.wiki.pipeline import page_outcome

    pages, wikitext_bytes, sentences = 0, 0, []
    start = harness.cpu_s()
    with open(dump, "rb") as f:
        for page in iter_pages(f):
            pages += 1
            wikitext_bytes += len(page.text.encode("utf-8"))
            outcome = page_outcome(page, str(dump), min_document_words=8)
            sentences += outcome.row["sentences"] if outcome.kind == "document" else []
    cpu = harness.cpu_s() - start
    return {
        "pages": pages,
        "wikitext_mb": wikitext_bytes / 1e6,
        "cpu_s": cpu,
        "pages_per_s_per_core": pages / cpu,
        "wikitext_mb_per_s_per_core": wikitext_bytes / 1e6 / cpu,
        "leak_per_1000_lines": leak_rate(sentences),
    }


def wikiextractor(python: Path, dump: Path) -> dict:
    """WikiExtractor (one extraction process) on the dump, as a separate program."""
    with tempfile.TemporaryDirectory() as out:
        command = [
            str(python),
            "-m",
            "wikiextractor.WikiExtractor",
            str(dump),
            "-o",
            out,
            "--processes",
            "1",
            "-q",
        ]
        run = harness.run(command)
        texts = [path.read_text(encoding="utf-8") for path in sorted(Path(out).rglob("wiki_*"))]
    lines = [line for text in texts for line in text.splitlines() if not line.startswith(("<doc", "</doc"))]
    return {
        "cpu_s": run.cpu_s,
        "wall_s": run.wall_s,
        "leak_per_1000_lines": leak_rate(lines),
        "lines": len(lines),
    }


def books(pattern: str) -> dict:
    """Decode, clean and split every book in this process; then their MinHash signatures."""
    from pipelines.books.pipeline import book_outcome
    from pipelines.corpus.dedup import minhash_signature

    files = sorted(glob.glob(pattern))
    mb = sum(os.path.getsize(f) for f in files) / 1e6
    start = harness.cpu_s()
    outcomes = [book_outcome(f, Path(f).read_bytes(), 100) for f in files]
    middle = harness.cpu_s()
    for outcome in outcomes:
        if outcome.kind == "document":
            minhash_signature(outcome.row["sentences"], 5, 120)
    cpu, minhash_cpu = middle - start, harness.cpu_s() - middle
    return {
        "books": len(files),
        "mb": mb,
        "cpu_s": cpu,
        "mb_per_s_per_core": mb / cpu,
        "minhash_mb_per_s_per_core": mb / minhash_cpu,
    }


def commands(dump: Path, pattern: str) -> dict:
    """Wall time of the three commands on Beam's in-process runner (one worker)."""
    with tempfile.TemporaryDirectory() as tmp:
        return {
            "wikipedia_wall_s": harness.pipelines(
                "wikipedia", input=dump, output=f"{tmp}/wiki", num_shards=4
            ).wall_s,
            "books_wall_s": harness.pipelines(
                "books", input=pattern, output=f"{tmp}/books", num_shards=4
            ).wall_s,
            "corpus_wall_s": harness.pipelines(
                "corpus", input=[f"{tmp}/wiki", f"{tmp}/books"], output=f"{tmp}/all", num_shards=4
            ).wall_s,
        }


def median_run(measure, repeats: int, *args) -> dict:
    """The run with the median CPU time of ``repeats``, with every run's CPU time."""
    runs = sorted((measure(*args) for _ in range(repeats)), key=lambda r: r["cpu_s"])
    return runs[len(runs) // 2] | {"cpu_s_runs": [round(r["cpu_s"], 3) for r in runs]}


def main() -> None:
    parser = harness.parser(__doc__, "corpus")
    parser.add_argument(
        "--wiki", type=Path, default=harness.WIKI_DUMP, help="a pages-articles dump (.xml.bz2)"
    )
    parser.add_argument("--books", default=str(harness.BOOKS / "*.txt"), help="a glob of plain-text books")
    peer = harness.ROOT / ".venv-wikiextractor" / "bin" / "python"
    parser.add_argument("--wikiextractor", type=Path, default=peer, help="Python with wikiextractor")
    parser.add_argument("--skip-commands", action="store_true", help="only the per-core stage timings")
    parser.add_argument("--repeats", type=int, default=3, help="runs per timing; the median is kept")
    args = parser.parse_args()
    harness.require(args.wiki)
    result: dict = {"wikipedia": median_run(wikipedia, args.repeats, args.wiki)}
    if args.wikiextractor.exists():
        result["wikiextractor"] = median_run(wikiextractor, args.repeats, args.wikiextractor, args.wiki)
        result["speed_ratio_vs_wikiextractor"] = (
            result["wikiextractor"]["cpu_s"] / result["wikipedia"]["cpu_s"]
        )
    else:
        print(f"wikiextractor: skipped, no {args.wikiextractor} ('make bench' installs it in its own venv)")
    if glob.glob(args.books):
        result["books"] = median_run(books, args.repeats, args.books)
        if not args.skip_commands:
            result["commands"] = commands(args.wiki, args.books)
    harness.write(args.json, result, rows=rows)


def rows(r: dict) -> list[Row]:
    wiki, peer, ratio = r["wikipedia"], "— (no WikiExtractor in this run)", "—"
    if "wikiextractor" in r:
        peer_rate = wiki["wikitext_mb"] / r["wikiextractor"]["cpu_s"]
        leaks = r["wikiextractor"]["leak_per_1000_lines"]
        peer = f"WikiExtractor 3.1.0, same dump: {n(peer_rate)} MB/s per core, {leaks:.2f} markup leaks per 1,000 lines"
        ratio = x(r["speed_ratio_vs_wikiextractor"])
    found = [
        (
            f"wikipedia: decompress, parse, clean, split sentences; enwiki excerpt ({wiki['pages']} pages with redirects, "
            f"{n(wiki['wikitext_mb'])} MB of wikitext), 1 core",
            f"{n(wiki['wikitext_mb_per_s_per_core'])} MB/s, {n(wiki['pages_per_s_per_core'])} pages/s, "
            f"{wiki['leak_per_1000_lines']:.2f} markup leaks per 1,000 sentences",
            peer,
            ratio,
        )
    ]
    if "books" in r:
        b = r["books"]
        where = f"{b['books']} Gutenberg books ({n(b['mb'])} MB), 1 core"
        found.append(
            (f"books: decode, strip, unwrap, split; {where}", f"{n(b['mb_per_s_per_core'])} MB/s", "—", "—")
        )
        found.append(
            (f"corpus: MinHash signatures; {where}", f"{n(b['minhash_mb_per_s_per_core'])} MB/s", "—", "—")
        )
    if "commands" in r:
        walls = ", ".join(
            f"`pipelines {k.removesuffix('_wall_s')}` {v:.1f} s" for k, v in r["commands"].items()
        )
        found.append(("whole commands, wall time on Beam's in-process runner, one worker", walls, "—", "—"))
    return found


if __name__ == "__main__":
    main()
