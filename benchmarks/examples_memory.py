"""Peak memory of ``pipelines examples`` on the local runner, at several input sizes and dupe factors.

    python benchmarks/examples_memory.py [--books 2 8 32] [--dupe-factors 1 5 10] [--runner FnApiRunner]

Input: N Gutenberg books from ../shared/data (the 8, sorted by name, taken in turn; past the
8th, copies of them whose first sentence names the copy, so every document is new), cleaned by
our books cleaner and written in the reference generator's format, made a corpus by
``pipelines text`` (4 shards); then ``pipelines examples`` (seq 128, 20 predictions, 8 shards, 64
buckets, bert-base-uncased's vocab) at each dupe factor on the largest input, and at the middle
dupe factor on each input, with ``--spill always`` (ours) and ``--spill never`` (the peer: the
same graph with everything shuffled through the runner's memory), alternating. Each command is
its own process; its peak RSS is the kernel's ``ru_maxrss`` of that process (``os.wait4``), what
``/usr/bin/time -v`` reports. Printed: the peak RSS of every run, and for each mode the ratio
largest / smallest over the input sizes and over the dupe factors, beside the same ratio of the
examples written. Results: ``benchmarks/results/examples_memory.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"
BOOKS = SHARED / "books" / "gutenberg"
VOCAB = SHARED / "vocab" / "bert-base-uncased_vocab.txt"
RESULTS = ROOT / "benchmarks" / "results" / "examples_memory.json"
MODES = ("always", "never")


def peak_rss_mb(command: list[str]) -> tuple[float, float]:
    """Run ``command`` as a child process; its peak RSS in MB and its wall seconds."""
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert process.stderr is not None
    stderr = process.stderr.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{stderr.decode()[-2000:]}")
    return usage.ru_maxrss / 1024, time.perf_counter() - start


def write_corpus(work: Path, num_books: int, runner: str) -> tuple[Path, float]:
    """``num_books`` books (copies past the 8th) as a ``pipelines text`` corpus; the corpus and
    its text MB."""
    from pipelines.books.pipeline import book_outcome

    books = sorted(BOOKS.glob("*.txt"))
    cleaned = {}
    docs = []
    for number in range(num_books):
        book, copy = books[number % len(books)], number // len(books)
        if book not in cleaned:
            outcome = book_outcome(str(book), book.read_bytes(), 100)
            cleaned[book] = outcome.row["sentences"] if outcome.row is not None else []
        if cleaned[book]:
            docs.append("\n".join(([f"This is copy {copy} of the book."] if copy else []) + cleaned[book]))
    text = work / f"books-{num_books}.txt"
    text.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    corpus = work / f"corpus-{num_books}"
    command = [sys.executable, "-m", "pipelines.cli", "text", "--input", str(text), "--output", str(corpus)]
    subprocess.run([*command, "--num-shards", "4", "--runner", runner], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    return corpus, text.stat().st_size / 1e6


def run_examples(corpus: Path, output: Path, dupe: int, runner: str, extra: list[str]) -> dict:
    """One ``pipelines examples`` run: its peak RSS, wall time and example count (and the shards'
    SHA-256, to check that spilling changes no byte)."""
    command = [sys.executable, "-m", "pipelines.cli", "examples", "--corpus", str(corpus),
               "--vocab", str(VOCAB), "--output", str(output), "--max-seq-length", "128",
               "--max-predictions-per-seq", "20", "--dupe-factor", str(dupe), "--num-shards", "8",
               "--num-buckets", "64", "--runner", runner, *extra]  # fmt: skip
    rss_mb, wall_s = peak_rss_mb(command)
    stats = json.loads((output / "stats.json").read_text())
    manifest = json.loads((output / "manifest.json").read_text())
    shards = [s["sha256"] for s in manifest["shards"]]
    return {"peak_rss_mb": round(rss_mb, 1), "wall_s": round(wall_s, 1), "examples": stats["examples"],
            "shards_sha256": shards}  # fmt: skip


def ratios(runs: list[dict]) -> dict:
    """Largest / smallest of peak RSS and of examples written over ``runs``."""
    rss = [r["peak_rss_mb"] for r in runs]
    examples = [r["examples"] for r in runs]
    return {"peak_rss": max(rss) / min(rss), "examples": max(examples) / min(examples)}


def measure(corpora: dict, work: Path, books: list[int], dupes: list[int], args) -> dict[str, dict]:
    """Every (input, dupe factor) point of the benchmark in both modes, the modes alternating."""
    middle = dupes[len(dupes) // 2]
    points = [(n, middle) for n in books] + [(books[-1], d) for d in dupes if d != middle]
    runs: dict[str, dict] = {mode: {} for mode in MODES}
    for n, dupe in points:
        for mode in MODES:
            output = work / f"ex-{n}-{dupe}-{mode}"
            run = run_examples(
                corpora[n][0], output, dupe, args.runner, ["--spill", mode, *args.extra.split()]
            )
            runs[mode][(n, dupe)] = {
                "books": n,
                "input_mb": round(corpora[n][1], 2),
                "dupe_factor": dupe,
                **run,
            }
            print(json.dumps({"spill": mode, **runs[mode][(n, dupe)], "shards_sha256": "..."}), flush=True)
    result = {}
    for mode in MODES:
        by_size = [runs[mode][(n, middle)] for n in books]
        by_dupe = [runs[mode][(books[-1], d)] for d in dupes]
        result[mode] = {
            "by_input_size": by_size,
            "by_dupe_factor": by_dupe,
            "ratio_by_input_size": ratios(by_size),
            "ratio_by_dupe_factor": ratios(by_dupe),
        }
    result["same_shards"] = all(
        runs["always"][point]["shards_sha256"] == runs["never"][point]["shards_sha256"] for point in points
    )
    for mode in MODES:
        for run in runs[mode].values():
            run.pop("shards_sha256")
    return result


def main() -> None:
    """Run every size and dupe factor in both modes; print and save the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--books", type=int, nargs="+", default=[2, 8, 32])
    parser.add_argument("--dupe-factors", type=int, nargs="+", default=[1, 5, 10])
    parser.add_argument("--runner", default="FnApiRunner")
    parser.add_argument("--extra", default="", help="more `pipelines examples` flags, space-separated")
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = str(ROOT)
    books, dupes = sorted(args.books), sorted(args.dupe_factors)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpora = {n: write_corpus(work, n, args.runner) for n in books}
        measured = measure(corpora, work, books, dupes, args)
    result = {
        "command": "pipelines examples --max-seq-length 128 --max-predictions-per-seq 20 --num-shards 8 "
        f"--num-buckets 64 --runner {args.runner} --spill always|never {args.extra}".strip(),
        "input": "N Gutenberg books (the 8 in turn, then copies), reference format, `pipelines text` (4 shards)",
        **measured,
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
