"""WordPiece tokenisation on one core: our WordPieceTokenizer, raw tokenizers and BertTokenizerFast.

    python benchmarks/tokenization.py [--books 'DIR/*.txt'] [--vocab vocab.txt] [--repeats 3]

Every line of the Gutenberg novels with the released uncased vocabulary, one line per call and
batches of 1,000; the peers are the ``tokenizers`` library we build on (``BertWordPieceTokenizer``)
and transformers' ``BertTokenizerFast``; every run's ids are checked equal. One core: the process is
pinned to one CPU, ``TOKENIZERS_PARALLELISM=false`` and ``RAYON_NUM_THREADS=1``. The six runs are
interleaved ``--repeats`` times, medians kept.
"""

from __future__ import annotations

import glob
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python benchmarks/NAME.py`
from benchmarks import harness
from benchmarks.harness import Row, n, x

BATCH = 1000
PEERS = {
    "tokenizers": "raw tokenizers (BertWordPieceTokenizer, the library we build on)",
    "transformers": "transformers' BertTokenizerFast",
}


def read_lines(pattern: str) -> list[str]:
    """Every line of every book matching ``pattern``."""
    lines: list[str] = []
    for path in sorted(glob.glob(pattern)):
        data = Path(path).read_bytes()
        try:
            lines.extend(data.decode("utf-8-sig").split("\n"))
        except UnicodeDecodeError:
            lines.extend(data.decode("latin-1").split("\n"))
    return lines


def encoders(vocab: Path) -> dict[str, dict[str, object]]:
    """Who -> mode -> a function from lines to their ids (no special tokens)."""
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    os.environ["RAYON_NUM_THREADS"] = "1"
    import tokenizers
    import transformers
    from transformers.models.bert.tokenization_bert import load_vocab

    from wordpiece.tokenizer import WordPieceTokenizer

    ours = WordPieceTokenizer.load(str(vocab), cased=False)
    raw = tokenizers.BertWordPieceTokenizer(str(vocab), lowercase=True)
    # vocab= (a dict): in transformers 5, vocab_file= is ignored and leaves a 5-token vocabulary.
    fast = transformers.BertTokenizerFast(vocab=load_vocab(str(vocab)), do_lower_case=True)
    assert fast.encode("hello", add_special_tokens=False) == [7592]
    single = {
        "ours": ours.encode,
        "tokenizers": lambda line: raw.encode(line, add_special_tokens=False).ids,
        "transformers": lambda line: fast.encode(line, add_special_tokens=False),
    }
    batch = {
        "ours": ours.encode_batch,
        "tokenizers": lambda b: [e.ids for e in raw.encode_batch(b, add_special_tokens=False)],
        "transformers": lambda b: fast(
            b, add_special_tokens=False, return_attention_mask=False, return_token_type_ids=False
        )["input_ids"],
    }
    return {
        who: {
            "single": lambda lines, f=single[who]: [f(line) for line in lines],
            "batch": lambda lines, f=batch[who]: [
                ids for i in range(0, len(lines), BATCH) for ids in f(lines[i : i + BATCH])
            ],
        }
        for who in single
    }


def main() -> None:
    parser = harness.parser(__doc__, "tokenization")
    parser.add_argument("--books", default=str(harness.BOOKS / "*.txt"), help="a glob of plain-text books")
    parser.add_argument("--vocab", type=Path, default=harness.VOCAB, help="a BERT vocab.txt (uncased)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per timing; the median is kept")
    parser.add_argument("--cpu", type=int, help="the CPU to pin to (default: the first allowed)")
    args = parser.parse_args()
    harness.require(args.vocab)
    cpu = args.cpu if args.cpu is not None else min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    lines = read_lines(args.books)
    mb = sum(len(line.encode("utf-8")) for line in lines) / 1e6
    runs = {f"{who} {mode}": f for who, modes in encoders(args.vocab).items() for mode, f in modes.items()}
    ids: dict[str, list] = {}
    times = harness.interleave(
        {k: lambda _, k=k, f=f: ids.__setitem__(k, f(lines)) for k, f in runs.items()}, args.repeats
    )
    result: dict = {
        "text": {"books": args.books, "lines": len(lines), "mb_utf8": round(mb, 6)},
        "batch_size": BATCH,
        "one_core": {"TOKENIZERS_PARALLELISM": "false", "RAYON_NUM_THREADS": "1", "pinned_cpu": cpu},
        "runs": {},
    }
    tokens = sum(map(len, ids["ours single"]))
    for key, t in times.items():
        assert ids[key] == ids["ours single"], f"{key}: ids differ"
        wall = statistics.median(t["wall_s"])
        result["runs"][key] = {
            "wall_s": wall,
            "cpu_s": statistics.median(t["cpu_s"]),
            "wall_s_runs": [round(w, 3) for w in t["wall_s"]],
            "mb_per_s": mb / wall,
            "lines_per_s": len(lines) / wall,
            "tokens_per_s": tokens / wall,
        }
    for peer in PEERS:
        result[f"ratio_ours_vs_{peer}"] = {
            mode: result["runs"][f"ours {mode}"]["mb_per_s"] / result["runs"][f"{peer} {mode}"]["mb_per_s"]
            for mode in ("single", "batch")
        }
    harness.write(args.json, result, "tokenizers", "transformers", rows=rows)


def rows(r: dict) -> list[Row]:
    runs, text = r["runs"], r["text"]
    where = f"{text['lines']:,} lines of Gutenberg books ({n(text['mb_utf8'])} MB), bert-base-uncased vocab, 1 core"
    return [
        (
            f"WordPiece tokenisation, {mode}; {where}",
            f"{n(runs[f'ours {mode}']['tokens_per_s'])} tokens/s",
            f"{label}: {n(runs[f'{peer} {mode}']['tokens_per_s'])} tokens/s",
            x(ratio),
        )
        for peer, label in PEERS.items()
        for mode, ratio in r[f"ratio_ours_vs_{peer}"].items()
    ]


def runs_table(r: dict) -> list[str]:
    """Every run's MB/s, lines/s and tokens/s, and ours over each peer."""
    lines = ["| run | MB/s | lines/s | tokens/s |", "|---|---:|---:|---:|"]
    for name, t in r["runs"].items():
        lines.append(f"| {name} | {t['mb_per_s']:.2f} | {t['lines_per_s']:,.0f} | {t['tokens_per_s']:,.0f} |")
    for peer in PEERS:
        ratio = r[f"ratio_ours_vs_{peer}"]
        lines.append(f"| ours / {peer} | {x(ratio['single'])} single, {x(ratio['batch'])} batched | | |")
    return lines


TABLES = {"runs": runs_table}


if __name__ == "__main__":
    main()
