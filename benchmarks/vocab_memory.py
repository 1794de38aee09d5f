"""Vocabulary learning's memory against distinct words, and what ``--max-words`` bounds it to.

    python benchmarks/vocab_memory.py [--uncapped 1000000 4000000] [--capped 16000000 30000000]

Each point runs in a fresh process: it writes ``word_counts`` shards (8, as ``wordpiece train``'s
counting job does) of N distinct synthetic words with Zipf counts (10 letters each, syllables; the
most frequent spread over the alphabet), then learns a 30,522-token vocabulary from them with
``wordpiece.train.learn_vocabulary``, the path ``wordpiece train`` takes after counting: the counts
read a record batch at a time, the most frequent ``--max-words`` kept. ``--uncapped`` sizes learn
from every word (``--max-words`` above N), ``--capped`` ones with the default. Peak RSS is the
kernel's for the process; the words left out are from its ``stats.json``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/NAME.py`
from benchmarks import harness
from benchmarks.harness import Row, n

SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
NUM_SHARDS = 8
ROWS_PER_TABLE = 1 << 16


def word(index: int) -> str:
    """The ``index``-th word: five syllables, in the order of the indexes (so shards are sorted)."""
    letters = []
    for _ in range(5):
        index, rest = divmod(index, len(SYLLABLES))
        letters.append(SYLLABLES[rest])
    return "".join(reversed(letters))


def _tables(first: int, last: int, distinct: int, total: list[int]):
    """Tables of the counts of words ``first`` to ``last`` (Zipf by a permutation of the index, so
    frequent words lie all over the alphabet); ``total`` counts their words."""
    from schemas import WORD_COUNTS

    for start in range(first, last, ROWS_PER_TABLE):
        indexes = range(start, min(last, start + ROWS_PER_TABLE))
        counts = [max(1, distinct // ((i * 2_654_435_761) % distinct + 1)) for i in indexes]
        total[0] += sum(counts)
        yield WORD_COUNTS.to_table(
            {"word": word(i), "count": c} for i, c in zip(indexes, counts, strict=True)
        )


def write_counts(folder: Path, distinct: int) -> int:
    """``distinct`` words' counts as sorted ``learn`` shards under ``folder/word_counts``; total words."""
    from pipelines.wordcount import counts_shard_name
    from schemas import WORD_COUNTS

    total, per_shard = [0], -(-distinct // NUM_SHARDS)
    (folder / "word_counts").mkdir(parents=True)
    for shard in range(NUM_SHARDS):
        first, last = shard * per_shard, min(distinct, (shard + 1) * per_shard)
        path = folder / counts_shard_name("learn", shard, NUM_SHARDS)
        with open(path, "wb") as f:
            for chunk in WORD_COUNTS.ipc_chunks(_tables(first, last, distinct, total), source=str(path)):
                f.write(chunk)
    return total[0]


def one_point(distinct: int, capped: bool) -> None:
    """Write the counts, learn from them; print the figures as JSON (the child)."""
    import resource

    from schemas import storage
    from wordpiece.train import MAX_WORDS, VocabConfig, learn_vocabulary

    with tempfile.TemporaryDirectory() as tmp:
        total = write_counts(Path(tmp), distinct)
        written_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        max_words = MAX_WORDS if capped else distinct + 1
        config = VocabConfig(corpus="corpus", output=tmp, max_words=max_words)
        stats = learn_vocabulary(config, "0" * 64, storage.Folder(tmp))
    print(
        json.dumps(
            {
                "distinct_words": distinct,
                "total_words": total,
                "max_words": max_words if capped else None,
                "distinct_words_learned": stats["distinct_words_learned"],
                "word_occurrences_left_out": stats["word_occurrences_left_out"],
                "learn_s": stats["learn_s"],
                "rss_after_writing_mb": round(written_rss_mb, 1),
            }
        )
    )


def main() -> None:
    parser = harness.parser(__doc__, "vocab_memory")
    parser.add_argument("--uncapped", type=int, nargs="*", default=[1_000_000, 4_000_000])
    parser.add_argument("--capped", type=int, nargs="*", default=[16_000_000, 30_000_000])
    args = parser.parse_args()
    points = []
    for distinct, capped in [(d, False) for d in args.uncapped] + [(d, True) for d in args.capped]:
        call = f"from benchmarks.vocab_memory import one_point; one_point({distinct}, {capped})"
        child = harness.run([sys.executable, "-c", call])
        points.append(json.loads(child.stdout) | {"peak_rss_mb": round(child.peak_rss_mb, 1)})
        print(points[-1], flush=True)
    harness.write(args.json, {"points": points}, "tokenizers", rows=rows)


def rows(r: dict) -> list[Row]:
    found = []
    for p in r["points"]:
        bound = (
            f"`--max-words` {p['max_words']:,}" if p["max_words"] else "every word (`--max-words` above it)"
        )
        found.append(
            (
                f"vocabulary learning from counts of {p['distinct_words']:,} distinct words, {bound}",
                f"peak {n(p['peak_rss_mb'])} MB, {p['learn_s']:,.0f} s",
                "—",
                "—",
            )
        )
    return found


def points_table(r: dict) -> list[str]:
    """Every point: distinct words counted and learned from, what was left out, time and memory."""
    lines = [
        "| distinct words counted | learned from | occurrences left out | learning | peak memory |",
        "|---:|---:|---:|---:|---:|",
    ]
    for p in r["points"]:
        share = p["word_occurrences_left_out"] / p["total_words"]
        lines.append(
            f"| {p['distinct_words']:,} | {p['distinct_words_learned']:,} | {share:.3%} | {p['learn_s']:,.0f} s "
            f"| {n(p['peak_rss_mb'])} MB |"
        )
    return lines


TABLES = {"points": points_table}


if __name__ == "__main__":
    main()
