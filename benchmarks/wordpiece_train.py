"""Vocabulary learning: time and peak memory against distinct words, and the tokenizers trainer.

    python benchmarks/wordpiece_train.py [--sizes 10000,100000,1000000] [--vocab-size 30522]

Each size runs in a fresh process (so its peak RSS is its own): Zipf-distributed counts of N
distinct synthetic words (syllables drawn so that words share pieces), learned with
``wordpiece.train.learn_pieces``. On real text (the Gutenberg books) the peer is the ``tokenizers``
trainer reading the text itself, against our path: count the words, then learn from the counts.
"""

from __future__ import annotations

import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/NAME.py`
from benchmarks import harness
from benchmarks.harness import Row, n, x


def learn(counts: list[tuple[str, int]], vocab_size: int) -> float:
    """Seconds to learn a vocabulary of ``vocab_size`` from sorted word counts."""
    from wordpiece.train import VocabConfig, alphabet_of, learn_pieces

    config = VocabConfig(corpus="c", output="o", vocab_size=vocab_size, num_unused=0)
    start = time.perf_counter()
    learn_pieces(counts, alphabet_of(counts, config.limit_alphabet), config, vocab_size - 5)
    return time.perf_counter() - start


def one_size(distinct: int, vocab_size: int) -> None:
    """Learn from ``distinct`` synthetic Zipf-counted words; print the figures as JSON (the child)."""
    rng = random.Random(0)
    syllables = [a + b for a in "bcdfghjklmnprstvwz" for b in "aeiou"] + list("aeiouy")
    words: set[str] = set()
    while len(words) < distinct:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(1, 5))))
    counts = sorted((w, max(1, int(10_000_000 / (rank + 1)))) for rank, w in enumerate(sorted(words)))
    total = sum(c for _, c in counts)
    print(
        json.dumps({"distinct_words": distinct, "total_words": total, "learn_s": learn(counts, vocab_size)})
    )


def real_text(vocab_size: int) -> dict:
    """Our count-then-learn path against the tokenizers trainer reading the same text."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    from wordpiece.tokenizer import pre_tokenize

    books = sorted(harness.BOOKS.glob("*.txt"))
    lines = [line for b in books for line in b.read_text(encoding="utf-8-sig", errors="replace").splitlines()]
    start = time.perf_counter()
    counts: Counter = Counter()
    for line in lines:
        counts.update(pre_tokenize(line, cased=False))
    count_s = time.perf_counter() - start
    learn_s = learn(sorted(counts.items()), vocab_size)
    start = time.perf_counter()
    peer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    peer.normalizer = normalizers.BertNormalizer(lowercase=True)
    peer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    peer.train_from_iterator(lines, trainers.WordPieceTrainer(vocab_size=vocab_size - 5, show_progress=False))
    peer_s = time.perf_counter() - start
    return {
        "text_mb": sum(len(line.encode()) for line in lines) / 1e6,
        "distinct_words": len(counts),
        "count_s": count_s,
        "learn_from_counts_s": learn_s,
        "tokenizers_trainer_on_text_s": peer_s,
        "learn_vs_peer_ratio": peer_s / learn_s,
    }


def main() -> None:
    parser = harness.parser(__doc__, "wordpiece_train")
    parser.add_argument("--sizes", default="10000,100000,1000000", help="distinct-word counts to try")
    parser.add_argument("--vocab-size", type=int, default=30_522)
    args = parser.parse_args()
    harness.require(harness.BOOKS)
    sizes = []
    for size in map(int, args.sizes.split(",")):
        call = f"from benchmarks.wordpiece_train import one_size; one_size({size}, {args.vocab_size})"
        child = harness.run([sys.executable, "-c", call])
        sizes.append(json.loads(child.stdout) | {"peak_rss_mb": child.peak_rss_mb})
    result = {"sizes": sizes, "real_text": real_text(args.vocab_size)}
    harness.write(args.json, result, "tokenizers", rows=rows)


def rows(r: dict) -> list[Row]:
    real = r["real_text"]
    where = f"{n(real['text_mb'])} MB of Gutenberg books ({real['distinct_words']:,} distinct words)"
    peer = f"tokenizers' WordPieceTrainer reading the text: {real['tokenizers_trainer_on_text_s']:.2f} s"
    end_to_end = real["count_s"] + real["learn_from_counts_s"]
    big = max(r["sizes"], key=lambda s: s["distinct_words"])
    return [
        (  # the headline: what a user runs, `wordpiece train`, against what they would run instead
            f"vocabulary learning end to end (counting + learning); {where}",
            f"{end_to_end:.2f} s",
            peer,
            x(real["tokenizers_trainer_on_text_s"] / end_to_end),
        ),
        (
            f"vocabulary learning, the learning phase only (counting excluded: not what a user runs); {where}",
            f"{real['learn_from_counts_s']:.2f} s from counts (+ {real['count_s']:.1f} s counting in this process)",
            peer,
            x(real["learn_vs_peer_ratio"]),
        ),
        (
            f"vocabulary learning from counts, {big['distinct_words']:,} distinct synthetic words (Zipf)",
            f"{big['learn_s']:.0f} s, peak {n(big['peak_rss_mb'])} MB",
            "—",
            "—",
        ),
    ]


def sizes_table(r: dict) -> list[str]:
    """Time and peak memory of learning from counts at each number of distinct words."""
    lines = ["| distinct words | total words | learning time | peak memory |", "|---:|---:|---:|---:|"]
    for s in r["sizes"]:
        lines.append(
            f"| {s['distinct_words']:,} | {s['total_words'] / 1e6:.1f} M | {s['learn_s']:.1f} s | {n(s['peak_rss_mb'])} MB |"
        )
    return lines


TABLES = {"sizes": sizes_table}


if __name__ == "__main__":
    main()
