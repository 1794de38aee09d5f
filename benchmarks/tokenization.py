"""Tokenisation throughput on one core: our WordPieceTokenizer, raw tokenizers and BertTokenizerFast.

    python benchmarks/tokenization.py [--books 'DIR/*.txt'] [--vocab vocab.txt] [--repeats 3]

Text: every line of the Gutenberg novels (UTF-8 with BOM, Latin-1 fallback); MB/s counts the
UTF-8 bytes of those lines. Vocabulary: the released BERT-Base uncased one, tokenised uncased.
Two peers: the ``tokenizers`` library we build on, called directly as a user would
(``tokenizers.BertWordPieceTokenizer(vocab, lowercase=True)``), and transformers'
``BertTokenizerFast``. Two modes: one line per call (``encode(line)``, ``peer.encode(line)``) and
batches of 1,000 lines (``encode_batch``, ``peer(batch)`` asking for ids only). Every timing
produces ids and is checked to equal the others'.

One core: before ``tokenizers`` is imported this script sets ``TOKENIZERS_PARALLELISM=false``
(the library's batch calls then run serially instead of on its Rayon pool) and
``RAYON_NUM_THREADS=1`` (a one-thread pool, should anything still use it), and pins the
process to one CPU with ``sched_setaffinity``. The CPU time of each run is reported beside the
wall time as the check (CPU/wall <= 1). The median of ``--repeats`` runs is kept.
"""

from __future__ import annotations

import os

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import glob  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import tokenizers  # noqa: E402

from wordpiece.tokenizer import WordPieceTokenizer  # noqa: E402

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
DEFAULT_BOOKS = str(SHARED / "books" / "gutenberg" / "*.txt")
DEFAULT_VOCAB = SHARED / "vocab" / "bert-base-uncased_vocab.txt"
RESULTS = Path(__file__).resolve().parent / "results" / "tokenization.json"
BATCH = 1000


def read_lines(pattern: str) -> list[str]:
    """Every line of every book matching ``pattern``."""
    lines: list[str] = []
    for path in sorted(glob.glob(pattern)):
        data = Path(path).read_bytes()
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            text = data.decode("latin-1")
        lines.extend(text.split("\n"))
    return lines


def one_at_a_time(encode: Callable[[str], list[int]]) -> Callable[[list[str]], list[list[int]]]:
    return lambda lines: [encode(line) for line in lines]


def batched(encode_batch: Callable[[list[str]], list[list[int]]]) -> Callable[[list[str]], list[list[int]]]:
    return lambda lines: [
        ids for i in range(0, len(lines), BATCH) for ids in encode_batch(lines[i : i + BATCH])
    ]


def time_runs(
    run: Callable[[list[str]], list[list[int]]], lines: list[str], repeats: int
) -> tuple[dict, list]:
    """Median-wall-time run of ``run(lines)``: wall and CPU seconds of each run, and the ids."""
    walls, cpus = [], []
    ids: list = []
    for _ in range(repeats):
        cpu, wall = time.process_time(), time.perf_counter()
        ids = run(lines)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    median = sorted(range(repeats), key=walls.__getitem__)[repeats // 2]
    return {
        "wall_s": walls[median],
        "cpu_s": cpus[median],
        "wall_s_runs": [round(w, 3) for w in walls],
    }, ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--books", default=DEFAULT_BOOKS, help="a glob of plain-text books")
    parser.add_argument("--vocab", type=Path, default=DEFAULT_VOCAB, help="a BERT vocab.txt (uncased)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per timing; the median is kept")
    parser.add_argument(
        "--cpu", type=int, default=None, help="the CPU to pin to (default: the first allowed)"
    )
    args = parser.parse_args()

    cpu = args.cpu if args.cpu is not None else min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})

    import transformers
    from transformers.models.bert.tokenization_bert import load_vocab

    lines = read_lines(args.books)
    mb = sum(len(line.encode("utf-8")) for line in lines) / 1e6
    ours = WordPieceTokenizer.load(str(args.vocab), cased=False)
    # vocab= (a dict): in transformers 5.x, vocab_file= is ignored and leaves a 5-token vocabulary.
    peer = transformers.BertTokenizerFast(vocab=load_vocab(str(args.vocab)), do_lower_case=True)
    assert peer.encode("hello", add_special_tokens=False) == [7592]

    def peer_batch(batch: list[str]) -> list[list[int]]:
        return peer(
            batch, add_special_tokens=False, return_attention_mask=False, return_token_type_ids=False
        )["input_ids"]

    raw = tokenizers.BertWordPieceTokenizer(str(args.vocab), lowercase=True)

    def raw_batch(batch: list[str]) -> list[list[int]]:
        return [e.ids for e in raw.encode_batch(batch, add_special_tokens=False)]

    runs = {
        ("ours", "single"): one_at_a_time(ours.encode),
        ("ours", "batch"): batched(ours.encode_batch),
        ("tokenizers", "single"): one_at_a_time(lambda line: raw.encode(line, add_special_tokens=False).ids),
        ("tokenizers", "batch"): batched(raw_batch),
        ("transformers", "single"): one_at_a_time(lambda line: peer.encode(line, add_special_tokens=False)),
        ("transformers", "batch"): batched(peer_batch),
    }
    results: dict = {
        "text": {"books": args.books, "lines": len(lines), "mb_utf8": round(mb, 6)},
        "batch_size": BATCH,
        "one_core": {
            "TOKENIZERS_PARALLELISM": os.environ["TOKENIZERS_PARALLELISM"],
            "RAYON_NUM_THREADS": os.environ["RAYON_NUM_THREADS"],
            "pinned_cpu": cpu,
        },
        "versions": {
            "python": platform.python_version(),
            "tokenizers": tokenizers.__version__,
            "transformers": transformers.__version__,
        },
        "machine": platform.machine(),
        "runs": {},
    }
    reference = None
    for (who, mode), run in runs.items():
        timing, ids = time_runs(run, lines, args.repeats)
        if reference is None:
            reference = ids
        assert ids == reference, f"{who} {mode}: ids differ"
        timing["mb_per_s"] = mb / timing["wall_s"]
        timing["lines_per_s"] = len(lines) / timing["wall_s"]
        timing["tokens_per_s"] = sum(map(len, ids)) / timing["wall_s"]
        results["runs"][f"{who} {mode}"] = timing
    r = results["runs"]
    for peer_name in ("tokenizers", "transformers"):
        results[f"ratio_ours_vs_{peer_name}"] = {
            mode: r[f"ours {mode}"]["mb_per_s"] / r[f"{peer_name} {mode}"]["mb_per_s"]
            for mode in ("single", "batch")
        }

    print(
        f"{len(lines):,} lines, {mb:.2f} MB of UTF-8, {sum(map(len, reference)):,} tokens; one core (CPU {cpu})"
    )
    print(f"{'':<22}{'MB/s':>8}{'lines/s':>11}{'tokens/s':>12}{'wall s':>9}{'CPU s':>8}")
    for name, t in r.items():
        print(
            f"{name:<22}{t['mb_per_s']:>8.2f}{t['lines_per_s']:>11,.0f}{t['tokens_per_s']:>12,.0f}"
            f"{t['wall_s']:>9.2f}{t['cpu_s']:>8.2f}"
        )
    for peer_name in ("tokenizers", "transformers"):
        for mode, ratio in results[f"ratio_ours_vs_{peer_name}"].items():
            print(f"ours / {peer_name}, {mode}: {ratio:.2f}x")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
