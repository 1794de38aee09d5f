"""Peak memory of ``pipelines examples`` on the local runner, over input sizes and dupe factors.

    python benchmarks/examples_memory.py [--books 2 8 32] [--dupe-factors 1 5 10]

N Gutenberg books (past the 8th, copies with a first sentence naming the copy) through ``pipelines
text``, then ``pipelines examples`` (seq 128, 8 shards, 64 buckets) at each dupe factor on the
largest input and at the middle one on each input, with ``--spill always`` (ours) and ``--spill
never`` (the peer: the same graph shuffling everything through the runner's memory), alternating.
Peak RSS is the kernel's for each command's process tree; the shards' SHA-256 are compared.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/NAME.py`
from benchmarks import harness
from benchmarks.harness import Row, x

MODES = ("always", "never")
CLI = [sys.executable, "-m", "pipelines.cli"]


def write_corpus(work: Path, num_books: int, runner: str) -> tuple[Path, float]:
    """``num_books`` books (copies past the 8th) as a ``pipelines text`` corpus; it and its text MB."""
    from pipelines.books.pipeline import book_outcome

    books = sorted(harness.BOOKS.glob("*.txt"))
    cleaned: dict[Path, list[str]] = {}
    docs = []
    for number in range(num_books):
        book, copy = books[number % len(books)], number // len(books)
        if book not in cleaned:
            outcome = book_outcome(str(book), book.read_bytes(), 100)
            cleaned[book] = outcome.row["sentences"] if outcome.row is not None else []
        if cleaned[book]:
            docs.append("\n".join(([f"This is copy {copy} of the book."] if copy else []) + cleaned[book]))
    text, corpus = work / f"books-{num_books}.txt", work / f"corpus-{num_books}"
    text.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    harness.run(
        [*CLI, "text", "--input", str(text), "--output", str(corpus), "--num-shards", "4", "--runner", runner]
    )
    return corpus, text.stat().st_size / 1e6


def run_examples(corpus: Path, output: Path, dupe: int, flags: list[str]) -> dict:
    """One ``pipelines examples`` run: its peak RSS, wall time, examples and shards' SHA-256."""
    inputs = ["--corpus", str(corpus), "--vocab", str(harness.VOCAB), "--output", str(output)]
    sizes = ["--max-seq-length", "128", "--max-predictions-per-seq", "20", "--dupe-factor", str(dupe)]
    run = harness.run([*CLI, "examples", *inputs, *sizes, "--num-shards", "8", "--num-buckets", "64", *flags])
    manifest = json.loads((output / "manifest.json").read_text())
    return {
        "peak_rss_mb": round(run.peak_rss_mb, 1),
        "wall_s": round(run.wall_s, 1),
        "examples": json.loads((output / "stats.json").read_text())["examples"],
        "shards_sha256": [s["sha256"] for s in manifest["shards"]],
    }


def ratios(runs: list[dict]) -> dict:
    """Largest / smallest of peak RSS and of examples written over ``runs``."""
    rss, examples = [r["peak_rss_mb"] for r in runs], [r["examples"] for r in runs]
    return {"peak_rss": max(rss) / min(rss), "examples": max(examples) / min(examples)}


def main() -> None:
    parser = harness.parser(__doc__, "examples_memory")
    parser.add_argument("--books", type=int, nargs="+", default=[2, 8, 32])
    parser.add_argument("--dupe-factors", type=int, nargs="+", default=[1, 5, 10])
    parser.add_argument("--runner", default="FnApiRunner")
    parser.add_argument("--extra", default="", help="more `pipelines examples` flags, space-separated")
    args = parser.parse_args()
    harness.require(harness.BOOKS, harness.VOCAB)
    books, dupes = sorted(args.books), sorted(args.dupe_factors)
    middle = dupes[len(dupes) // 2]
    points = [(b, middle) for b in books] + [(books[-1], d) for d in dupes if d != middle]
    runs: dict[str, dict] = {mode: {} for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpora = {b: write_corpus(work, b, args.runner) for b in books}
        for b, dupe in points:
            for mode in MODES:
                flags = ["--runner", args.runner, "--spill", mode, *args.extra.split()]
                run = run_examples(corpora[b][0], work / f"ex-{b}-{dupe}-{mode}", dupe, flags)
                runs[mode][b, dupe] = {
                    "books": b,
                    "input_mb": round(corpora[b][1], 2),
                    "dupe_factor": dupe,
                    **run,
                }
    result: dict = {
        "command": "pipelines examples --max-seq-length 128 --max-predictions-per-seq 20 --num-shards 8 "
        f"--num-buckets 64 --runner {args.runner} --spill always|never {args.extra}".strip(),
        "input": "N Gutenberg books (the 8 in turn, then copies), reference format, `pipelines text` (4 shards)",
        "same_shards": all(
            runs["always"][p]["shards_sha256"] == runs["never"][p]["shards_sha256"] for p in points
        ),
    }
    for mode in MODES:
        for run in runs[mode].values():
            run.pop("shards_sha256")
        by_size, by_dupe = [runs[mode][b, middle] for b in books], [runs[mode][books[-1], d] for d in dupes]
        result[mode] = {
            "by_input_size": by_size,
            "by_dupe_factor": by_dupe,
            "ratio_by_input_size": ratios(by_size),
            "ratio_by_dupe_factor": ratios(by_dupe),
        }
    harness.write(args.json, result, rows=rows)


def rows(r: dict) -> list[Row]:
    ours, peer, found = r["always"], r["never"], []
    for key, what in (("input_size", "input sizes"), ("dupe_factor", "dupe factors")):
        mine, theirs = ours[f"by_{key}"], peer[f"by_{key}"]
        first, last = mine[0], mine[-1]
        span = (
            f"{first['input_mb']:.1f} to {last['input_mb']:.1f} MB of books, dupe {first['dupe_factor']}"
            if key == "input_size"
            else f"{last['input_mb']:.1f} MB of books, dupe {first['dupe_factor']} to {last['dupe_factor']}"
        )
        found.append(
            (
                f"peak RSS of `pipelines examples` (FnApiRunner, 8 shards, 64 buckets) over {what}: {span} "
                f"({ours[f'ratio_by_{key}']['examples']:.1f}x the examples); largest / smallest",
                f"--spill always: {first['peak_rss_mb']:,.0f} to {last['peak_rss_mb']:,.0f} MB, "
                f"**{ours[f'ratio_by_{key}']['peak_rss']:.2f}x**",
                f"--spill never (everything shuffled through the runner's memory): "
                f"{theirs[0]['peak_rss_mb']:,.0f} to {theirs[-1]['peak_rss_mb']:,.0f} MB, "
                f"{peer[f'ratio_by_{key}']['peak_rss']:.2f}x"
                + ("; same shards" if r["same_shards"] else "; SHARDS DIFFER"),
                x(theirs[-1]["peak_rss_mb"] / last["peak_rss_mb"]) + " less at the largest",
            )
        )
    return found


def points_table(r: dict) -> list[str]:
    """Every measured point in both modes, and the growth over sizes and over dupe factors."""
    ours, peer = r["always"], r["never"]
    lines = ["| input | dupe | examples | `--spill never` | `--spill always` |", "|---|---|---|---|---|"]
    seen = set()
    for key in ("by_input_size", "by_dupe_factor"):
        for mine, theirs in zip(ours[key], peer[key], strict=True):
            if (mine["books"], mine["dupe_factor"]) not in seen:
                seen.add((mine["books"], mine["dupe_factor"]))
                lines.append(
                    f"| {mine['books']} books ({mine['input_mb']:.2f} MB) | {mine['dupe_factor']} | {mine['examples']:,} "
                    f"| {theirs['peak_rss_mb']:,.0f} MB | {mine['peak_rss_mb']:,.0f} MB |"
                )
    for key, what in (("input_size", "input sizes"), ("dupe_factor", "dupe factors")):
        mine, theirs = ours[f"ratio_by_{key}"], peer[f"ratio_by_{key}"]
        lines.append(
            f"| **largest / smallest**, over the {what} | | {mine['examples']:.1f}x | {theirs['peak_rss']:.2f}x "
            f"| **{mine['peak_rss']:.2f}x** |"
        )
    return lines


TABLES = {"points": points_table}


if __name__ == "__main__":
    main()
