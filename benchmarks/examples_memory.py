"""Peak memory of ``pipelines examples`` on the local runner, at several input sizes and dupe factors.

    python benchmarks/examples_memory.py [--books 2 4 8] [--dupe-factors 1 5 10] [--runner FnApiRunner]

Input: the first N Gutenberg books under ../shared/data (sorted by name), cleaned by our books
cleaner and written in the reference generator's format, made a corpus by ``pipelines text``
(4 shards); then ``pipelines examples`` (seq 128, 20 predictions, 8 shards, 64 buckets,
bert-base-uncased's vocab) at each dupe factor on the largest input, and at the middle dupe factor
on each input. Each command is its own process; its peak RSS is the kernel's ``ru_maxrss`` of that
process (``os.wait4``), which is what ``/usr/bin/time -v`` reports. Printed: the peak RSS of every
run, the ratio largest / smallest over the input sizes and over the dupe factors, and the same for
the examples written, so that the two growths can be compared. Results:
``benchmarks/results/examples_memory.json``.
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
    """The first ``num_books`` books as a ``pipelines text`` corpus; the corpus and its text MB."""
    from pipelines.books.pipeline import book_outcome

    docs = []
    for book in sorted(BOOKS.glob("*.txt"))[:num_books]:
        outcome = book_outcome(str(book), book.read_bytes(), 100)
        if outcome.row is not None and "sentences" in outcome.row:
            docs.append("\n".join(outcome.row["sentences"]))
    text = work / f"books-{num_books}.txt"
    text.write_text("\n\n".join(docs) + "\n", encoding="utf-8")
    corpus = work / f"corpus-{num_books}"
    command = [sys.executable, "-m", "pipelines.cli", "text", "--input", str(text), "--output", str(corpus)]
    subprocess.run([*command, "--num-shards", "4", "--runner", runner], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    return corpus, text.stat().st_size / 1e6


def run_examples(corpus: Path, output: Path, dupe: int, runner: str, extra: list[str]) -> dict:
    """One ``pipelines examples`` run: its peak RSS, wall time and example count."""
    command = [sys.executable, "-m", "pipelines.cli", "examples", "--corpus", str(corpus),
               "--vocab", str(VOCAB), "--output", str(output), "--max-seq-length", "128",
               "--max-predictions-per-seq", "20", "--dupe-factor", str(dupe), "--num-shards", "8",
               "--num-buckets", "64", "--runner", runner, *extra]  # fmt: skip
    rss_mb, wall_s = peak_rss_mb(command)
    stats = json.loads((output / "stats.json").read_text())
    return {"peak_rss_mb": round(rss_mb, 1), "wall_s": round(wall_s, 1), "examples": stats["examples"]}


def ratios(runs: list[dict]) -> dict:
    """Largest / smallest of peak RSS and of examples written over ``runs``."""
    rss = [r["peak_rss_mb"] for r in runs]
    examples = [r["examples"] for r in runs]
    return {"peak_rss": max(rss) / min(rss), "examples": max(examples) / min(examples)}


def main() -> None:
    """Run every size and dupe factor; print and save the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--books", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--dupe-factors", type=int, nargs="+", default=[1, 5, 10])
    parser.add_argument("--runner", default="FnApiRunner")
    parser.add_argument("--extra", default="", help="more `pipelines examples` flags, space-separated")
    args = parser.parse_args()
    os.environ["PYTHONPATH"] = str(ROOT)
    books, dupes = sorted(args.books), sorted(args.dupe_factors)
    middle = dupes[len(dupes) // 2]
    by_size, by_dupe = [], []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        corpora = {n: write_corpus(work, n, args.runner) for n in books}
        for n in books:
            run = run_examples(
                corpora[n][0], work / f"ex-{n}-{middle}", middle, args.runner, args.extra.split()
            )
            by_size.append({"books": n, "input_mb": round(corpora[n][1], 2), "dupe_factor": middle, **run})
            print(json.dumps(by_size[-1]), flush=True)
        for dupe in dupes:
            if dupe == middle:
                by_dupe.append(by_size[-1])
                continue
            run = run_examples(corpora[books[-1]][0], work / f"ex-{books[-1]}-{dupe}", dupe, args.runner,
                               args.extra.split())  # fmt: skip
            by_dupe.append({"books": books[-1], "input_mb": round(corpora[books[-1]][1], 2),
                            "dupe_factor": dupe, **run})  # fmt: skip
            print(json.dumps(by_dupe[-1]), flush=True)
    by_dupe.sort(key=lambda r: r["dupe_factor"])
    result = {
        "command": "pipelines examples --max-seq-length 128 --max-predictions-per-seq 20 --num-shards 8 "
        f"--num-buckets 64 --runner {args.runner} {args.extra}".strip(),
        "input": "the first N Gutenberg books (sorted by name), reference format, `pipelines text` (4 shards)",
        "by_input_size": by_size,
        "by_dupe_factor": by_dupe,
        "ratio_by_input_size": ratios(by_size),
        "ratio_by_dupe_factor": ratios(by_dupe),
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
