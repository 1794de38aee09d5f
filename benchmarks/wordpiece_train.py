"""Vocabulary learning: time and peak memory against distinct words and corpus size.

    python benchmarks/wordpiece_train.py [--sizes 10000,100000,1000000] [--vocab-size 30522]

Each size runs in a fresh process (so peak RSS is its own): Zipf-distributed word counts over
N distinct synthetic words (letters drawn so that words share pieces), learned with
``wordpiece.train.learn_pieces``. The peer, on real text (the Gutenberg books), is the
``tokenizers`` trainer reading the text itself, against our path: count words, then learn
from the counts; both times are printed with their ratio. Results go to
``benchmarks/results/wordpiece_train.json``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
RESULTS = Path(__file__).resolve().parent / "results" / "wordpiece_train.json"

_ONE_SIZE = """
import json, random, resource, sys, time
from wordpiece.train import VocabConfig, alphabet_of, learn_pieces
distinct, vocab_size = int(sys.argv[1]), int(sys.argv[2])
rng = random.Random(0)
syllables = [a + b for a in "bcdfghjklmnprstvwz" for b in "aeiou"] + list("aeiouy")
words = set()
while len(words) < distinct:
    words.add("".join(rng.choice(syllables) for _ in range(rng.randint(1, 5))))
counts = sorted((w, max(1, int(10_000_000 / (rank + 1)))) for rank, w in enumerate(sorted(words)))
config = VocabConfig(corpus="c", output="o", vocab_size=vocab_size, num_unused=0)
start = time.perf_counter()
alphabet = alphabet_of(counts, config.limit_alphabet)
pieces = learn_pieces(counts, alphabet, config, vocab_size - 5)
print(json.dumps({"distinct_words": distinct, "total_words": sum(c for _, c in counts),
                  "learn_s": time.perf_counter() - start, "pieces": len(pieces),
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def bench_sizes(sizes: list[int], vocab_size: int) -> list[dict]:
    """Learn from synthetic counts of each size in a fresh process."""
    rows = []
    for size in sizes:
        out = subprocess.run(
            [sys.executable, "-c", _ONE_SIZE, str(size), str(vocab_size)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        rows.append(json.loads(out))
        row = rows[-1]
        print(
            f"{row['distinct_words']:>9,} distinct words ({row['total_words']:,} total): "
            f"{row['learn_s']:.1f} s, peak RSS {row['peak_rss_mb']:.0f} MB"
        )
    return rows


def bench_real_text(vocab_size: int) -> dict | None:
    """Our count-then-learn path against the tokenizers trainer reading the same text."""
    from collections import Counter

    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    from wordpiece.tokenizer import pre_tokenize
    from wordpiece.train import VocabConfig, alphabet_of, learn_pieces

    books = sorted((SHARED / "books" / "gutenberg").glob("*.txt"))
    if not books:
        return None
    lines = [line for b in books for line in b.read_text(encoding="utf-8-sig", errors="replace").splitlines()]
    mb = sum(len(line.encode()) for line in lines) / 1e6

    start = time.perf_counter()
    counts: Counter = Counter()
    for line in lines:
        counts.update(pre_tokenize(line, cased=False))
    count_s = time.perf_counter() - start
    config = VocabConfig(corpus="c", output="o", vocab_size=vocab_size, num_unused=0)
    start = time.perf_counter()
    items = sorted(counts.items())
    learn_pieces(items, alphabet_of(items, config.limit_alphabet), config, vocab_size - 5)
    learn_s = time.perf_counter() - start

    start = time.perf_counter()
    peer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    peer.normalizer = normalizers.BertNormalizer(lowercase=True)
    peer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    peer.train_from_iterator(lines, trainers.WordPieceTrainer(vocab_size=vocab_size - 5, show_progress=False))
    peer_s = time.perf_counter() - start
    result = {
        "text_mb": mb,
        "distinct_words": len(counts),
        "count_s": count_s,
        "learn_from_counts_s": learn_s,
        "tokenizers_trainer_on_text_s": peer_s,
        "learn_vs_peer_ratio": peer_s / learn_s,
    }
    print(
        f"books ({mb:.1f} MB, {len(counts):,} distinct words): counting {count_s:.1f} s (one core; Beam spreads it), "
        f"learning from counts {learn_s:.2f} s; tokenizers' trainer on the text {peer_s:.2f} s "
        f"(learning alone is {result['learn_vs_peer_ratio']:.1f}x faster)"
    )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000,1000000", help="distinct-word counts to try")
    parser.add_argument("--vocab-size", type=int, default=30_522)
    args = parser.parse_args()
    results = {
        "sizes": bench_sizes([int(s) for s in args.sizes.split(",")], args.vocab_size),
        "real_text": bench_real_text(args.vocab_size),
        "driver_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
