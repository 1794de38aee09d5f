"""Example generation per core, against an estimate of the reference generator.

    python benchmarks/examples.py [--vocab VOCAB.txt] [--dupe-factor 5]

Ours: the stage's own functions in one process (fast WordPiece tokenisation, pair planning,
random-B fulfilment, truncation, masking) over every document of the real corpus (the enwiki
excerpt's articles and the Gutenberg books, cleaned as `pipelines` does), timed on CPU.

The reference (google-research/bert's create_pretraining_data.py) cannot run here (it needs
TensorFlow). Its cost is estimated from its two parts, each measured on the same input: its
tokenizer is pure Python, measured with transformers' `BertTokenizerLegacy` (a port of the
original `tokenization.py`); its pairing and masking are the same pure-Python algorithms as
ours, so our planning+finishing time stands in for them. TFRecord serialisation is left out,
which flatters the reference. Results go to `benchmarks/results/examples.json`.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
from pathlib import Path

from pipelines.books.pipeline import book_outcome
from pipelines.examples.masking import MaskingConfig, mask_tokens
from pipelines.examples.pairs import (
    PairConfig,
    assemble,
    plan_pairs,
    seeded_rng,
    take_random_b,
    truncate_pair,
)
from pipelines.wiki.dump import iter_pages
from pipelines.wiki.pipeline import page_outcome
from wordpiece.tokenizer import SPECIAL_TOKENS, WordPieceTokenizer

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
RESULTS = Path(__file__).resolve().parent / "results" / "examples.json"


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def load_documents() -> list[list[str]]:
    """The sentences of every document of the real corpus."""
    docs = []
    dump = SHARED / "wiki" / "gensim_enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
    with open(dump, "rb") as f:
        for page in iter_pages(f):
            outcome = page_outcome(page, str(dump), 8)
            if outcome.kind == "document":
                docs.append(outcome.row["sentences"])
    for book in sorted((SHARED / "books" / "gutenberg").glob("*.txt")):
        outcome = book_outcome(str(book), book.read_bytes(), 100)
        if outcome.kind == "document":
            docs.append(outcome.row["sentences"])
    return docs


def generate(tokenized: list[list[list[int]]], tokenizer: WordPieceTokenizer, dupe_factor: int) -> int:
    """Plan, fulfil, truncate and mask every pair in one process; return the example count."""
    pairs, masking = PairConfig(max_seq_length=128), MaskingConfig()
    ids = {t: i for i, t in enumerate(tokenizer.vocab)}
    special = frozenset(SPECIAL_TOKENS)
    random_ids = [
        i for i, t in enumerate(tokenizer.vocab) if t not in special and not t.startswith("[unused")
    ]
    count = 0
    for index, sentences in enumerate(tokenized):
        for dupe in range(dupe_factor):
            for plan in plan_pairs(str(index), sentences, dupe, pairs, seeded_rng(1, index, dupe)):
                rng = seeded_rng(1, index, dupe, plan.pair_index)
                if plan.is_random_next:
                    other = (index + 1 + rng.randrange(len(tokenized) - 1)) % len(tokenized)
                    tokens_b = take_random_b(tokenized[other], plan.random_b_length, rng)
                else:
                    tokens_b = list(plan.tokens_b)
                tokens_a = list(plan.tokens_a)
                truncate_pair(tokens_a, tokens_b, pairs.max_num_tokens, rng)
                seq, _ = assemble(tokens_a, tokens_b, ids["[CLS]"], ids["[SEP]"])
                mask_tokens(
                    seq,
                    [tokenizer.vocab[i] for i in seq],
                    config=masking,
                    mask_id=ids["[MASK]"],
                    random_ids=random_ids,
                    special=special,
                    rng=rng,
                )
                count += 1
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", default=str(SHARED / "vocab" / "bert-base-uncased_vocab.txt"))
    parser.add_argument("--dupe-factor", type=int, default=5)
    args = parser.parse_args()
    if not Path(args.vocab).exists() or not (SHARED / "wiki").exists():
        print(f"benchmark input missing under {SHARED} (and --vocab {args.vocab})", file=sys.stderr)
        return 2
    docs = load_documents()
    tokenizer = WordPieceTokenizer.load(args.vocab, cased=False)

    start = _cpu_s()
    tokenized = [[ids for ids in tokenizer.encode_batch(sentences) if ids] for sentences in docs]
    tokenize_s = _cpu_s() - start
    start = _cpu_s()
    examples = generate(tokenized, tokenizer, args.dupe_factor)
    generate_s = _cpu_s() - start
    ours_s = tokenize_s + generate_s

    from transformers import BertTokenizerLegacy

    legacy = BertTokenizerLegacy(vocab_file=args.vocab, do_lower_case=True)
    sample = [s for doc in docs for s in doc][::20]  # 5% of the sentences, extrapolated
    start = _cpu_s()
    for sentence in sample:
        legacy.convert_tokens_to_ids(legacy.tokenize(sentence))
    reference_tokenize_s = (_cpu_s() - start) * 20
    reference_s = reference_tokenize_s + generate_s

    result = {
        "documents": len(docs),
        "examples": examples,
        "dupe_factor": args.dupe_factor,
        "ours_cpu_s": ours_s,
        "ours_examples_per_s_per_core": examples / ours_s,
        "ours_documents_per_s_per_core": len(docs) * args.dupe_factor / ours_s,
        "ours_tokenize_s": tokenize_s,
        "generate_s": generate_s,
        "reference_tokenize_s_estimated": reference_tokenize_s,
        "reference_cpu_s_estimated": reference_s,
        "speedup_vs_reference_estimate": reference_s / ours_s,
    }
    print(f"{len(docs)} documents x dupe {args.dupe_factor} -> {examples:,} examples (seq 128)")
    print(
        f"ours: {ours_s:.1f} s CPU = {result['ours_examples_per_s_per_core']:.0f} examples/s/core, "
        f"{result['ours_documents_per_s_per_core']:.1f} document passes/s/core "
        f"(tokenise {tokenize_s:.1f} s, pairs+masking {generate_s:.1f} s)"
    )
    print(
        f"reference estimate: pure-Python tokenisation {reference_tokenize_s:.1f} s + the same pairing and "
        f"masking {generate_s:.1f} s = {reference_s:.1f} s; ours is {result['speedup_vs_reference_estimate']:.1f}x "
        "per core (before Beam spreads it over workers)"
    )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    random.seed(0)
    sys.exit(main())
