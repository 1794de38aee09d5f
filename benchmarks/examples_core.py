"""Example generation's core functions per core, outside Beam (a profile, not a headline).

    python benchmarks/examples_core.py [--vocab VOCAB.txt] [--dupe-factor 5]

The headline comparison against Google's real generator is benchmarks/examples.py; this one
times only our library functions against our own re-implementation of the reference.

Ours: the stage's own library functions in one process, as its Beam steps call them
(tokenise each document once, plan every dupe pass and finish the actual-next pairs, fulfil
the random-next requests bucket by bucket and finish them), over every document of the real
corpus (the enwiki excerpt's articles and the Gutenberg books, cleaned as `pipelines` does),
timed on CPU. Writing the Arrow shards is left out.

The reference (google-research/bert's create_pretraining_data.py) cannot run here (it needs
TensorFlow). It is timed in its two pure-Python parts on the same documents: its tokenizer,
as transformers' `BertTokenizerLegacy` (a port of the original `tokenization.py`), and its
instance creation and feature padding, as `reference_generator.py` (our re-implementation of
that algorithm). Its TFRecord serialisation is left out. Results go to
`benchmarks/results/examples.json`.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import sys
from collections import defaultdict
from pathlib import Path

from pipelines.books.pipeline import book_outcome
from pipelines.examples.pairs import PairConfig
from pipelines.examples.pipeline import (
    ExamplesConfig,
    ExampleVocab,
    RequestDrawer,
    bucket_of,
    fulfil_bucket,
    plan_document,
    tokenize_document,
)
from pipelines.wiki.dump import iter_pages
from pipelines.wiki.pipeline import page_outcome
from wordpiece.tokenizer import WordPieceTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference_generator  # noqa: E402  (a sibling script, not a package)

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
RESULTS = Path(__file__).resolve().parent / "results" / "examples_core.json"


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


def generate(documents, tokenizer: WordPieceTokenizer, dupe_factor: int) -> int:
    """Plan, fulfil, truncate and mask every pair in one process; return the example count."""
    config = ExamplesConfig(
        corpus="-", vocab="-", output="-", dupe_factor=dupe_factor, pairs=PairConfig(max_seq_length=128)
    )
    vocab = ExampleVocab.build(tokenizer.vocab, random_token_from_whole_vocab=False)
    sizes: dict[int, int] = defaultdict(int)
    buckets: dict[int, list] = defaultdict(list)
    for document in documents:
        bucket = bucket_of(document.doc_id, config.num_buckets)
        sizes[bucket] += 1
        buckets[bucket].append(document)
    drawer = RequestDrawer(dict(sizes))
    requests: dict[int, list] = defaultdict(list)
    count = 0
    for document in documents:
        rows, _, wanted = plan_document(document, config, drawer, vocab)
        count += len(rows)
        for bucket, request in wanted:
            requests[bucket].append(request)
    for bucket, wanted in requests.items():
        for rows, _ in fulfil_bucket(buckets[bucket], wanted, config, vocab):
            count += len(rows)
    return count


def reference(docs: list[list[str]], vocab_file: str, dupe_factor: int) -> tuple[int, float, float, float]:
    """The reference's tokenisation, instance creation and feature padding: (instances, seconds each)."""
    from transformers import BertTokenizerLegacy

    legacy = BertTokenizerLegacy(vocab_file=vocab_file, do_lower_case=True)
    start = _cpu_s()
    tokenized = [[tokens for tokens in (legacy.tokenize(s) for s in doc) if tokens] for doc in docs]
    tokenize_s = _cpu_s() - start
    vocab = dict(legacy.vocab)
    start = _cpu_s()
    instances = reference_generator.create_training_instances(
        tokenized, list(vocab), random.Random(12345), dupe_factor=dupe_factor, max_seq_length=128
    )
    instances_s = _cpu_s() - start
    start = _cpu_s()
    for instance in instances:
        reference_generator.instance_features(instance, vocab, 128, 20)
    features_s = _cpu_s() - start
    return len(instances), tokenize_s, instances_s, features_s


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
    tokenizer.tokenizer.encode_special_tokens = True  # as the pipeline

    start = _cpu_s()
    documents = [tokenize_document(tokenizer, f"doc-{i}", sentences) for i, sentences in enumerate(docs)]
    tokenize_s = _cpu_s() - start
    start = _cpu_s()
    examples = generate(documents, tokenizer, args.dupe_factor)
    generate_s = _cpu_s() - start
    ours_s = tokenize_s + generate_s

    ref_examples, ref_tokenize_s, ref_instances_s, ref_features_s = reference(
        docs, args.vocab, args.dupe_factor
    )
    reference_s = ref_tokenize_s + ref_instances_s + ref_features_s

    result = {
        "documents": len(docs),
        "examples": examples,
        "dupe_factor": args.dupe_factor,
        "ours_cpu_s": ours_s,
        "ours_examples_per_s_per_core": examples / ours_s,
        "ours_documents_per_s_per_core": len(docs) * args.dupe_factor / ours_s,
        "ours_tokenize_s": tokenize_s,
        "generate_s": generate_s,
        "reference_examples": ref_examples,
        "reference_tokenize_s": ref_tokenize_s,
        "reference_instances_s": ref_instances_s,
        "reference_features_s": ref_features_s,
        "reference_cpu_s": reference_s,
        "reference_examples_per_s_per_core": ref_examples / reference_s,
        "speedup_vs_reference": (examples / ours_s) / (ref_examples / reference_s),
        "speedup_generate_vs_reference": (ref_instances_s + ref_features_s) / generate_s,
    }
    print(f"{len(docs)} documents x dupe {args.dupe_factor} -> {examples:,} examples (seq 128)")
    print(
        f"ours: {ours_s:.1f} s CPU = {result['ours_examples_per_s_per_core']:.0f} examples/s/core, "
        f"{result['ours_documents_per_s_per_core']:.1f} document passes/s/core "
        f"(tokenise {tokenize_s:.1f} s, pairs+masking {generate_s:.1f} s)"
    )
    print(
        f"reference: {reference_s:.1f} s CPU for {ref_examples:,} instances = "
        f"{result['reference_examples_per_s_per_core']:.0f} examples/s/core (tokenise {ref_tokenize_s:.1f} s, "
        f"instances {ref_instances_s:.1f} s, features {ref_features_s:.1f} s; no TFRecord writing)"
    )
    print(
        f"ours is {result['speedup_vs_reference']:.1f}x per core in examples/s "
        f"(pairs+masking alone {result['speedup_generate_vs_reference']:.1f}x), before Beam spreads it over workers"
    )
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
