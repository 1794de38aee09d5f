"""``pipelines examples``: corpus documents + a vocabulary → masked, NSP-paired example shards.

Graph (no worker ever holds the corpus):

1. Read the split's document shards and tokenise each sentence (literal ``[SEP]`` text stays
   text). Documents are keyed by a bucket, ``hash(doc_id) mod num_buckets``.
2. Count documents per bucket (a small side input).
3. Per document and dupe pass, ``plan_pairs``. A pair whose B must come from another document
   becomes a request: a bucket drawn with probability proportional to its documents (the
   requester's own document left out) and an index inside it, so every other document is
   equally likely, as in the reference, and never the requester's own.
4. Requests and documents meet by bucket (``CoGroupByKey``); ``take_random_b`` cuts B.
5. Each pair is truncated, assembled and masked with a generator seeded by its identity.
6. Examples are written by ``WriteShards`` (shard chosen by a hash of the pair's identity,
   rows sorted), then ``stats.json``, ``manifest.json`` (with the vocabulary's SHA-256) and
   ``COMPLETED``.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

import apache_beam as beam

from pipelines import io
from pipelines.examples.masking import MaskingConfig, mask_tokens
from pipelines.examples.pairs import (
    PairConfig,
    PairPlan,
    assemble,
    plan_pairs,
    seeded_rng,
    take_random_b,
    truncate_pair,
)
from pipelines.stage import WriteShards, shard_index, write_completion
from pipelines.stats import bucket_label, sum_tallies
from schemas import (
    Manifest,
    ShardEntry,
)
from schemas.examples import EXAMPLES_VERSION, examples_format
from wordpiece.tokenizer import SPECIAL_TOKENS, WordPieceTokenizer


@dataclass(frozen=True)
class ExamplesConfig:
    """Options of ``pipelines examples``, validated on creation."""

    corpus: str
    vocab: str
    output: str
    split: str = "train"
    cased: bool = False
    dupe_factor: int = 5
    seed: int = 12345
    num_shards: int = 256
    num_buckets: int = 1024
    pairs: PairConfig = PairConfig()
    masking: MaskingConfig = MaskingConfig()
    random_token_from_whole_vocab: bool = False
    overwrite: bool = False

    def __post_init__(self) -> None:
        problems = []
        for name in ("corpus", "vocab", "output"):
            if not getattr(self, name):
                problems.append(f"--{name} is required")
        if self.split not in io.SPLITS:
            problems.append(f"--split takes {', '.join(io.SPLITS)}, got {self.split}")
        for name in ("dupe_factor", "num_shards", "num_buckets"):
            if getattr(self, name) < 1:
                problems.append(f"--{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if problems:
            raise ValueError("invalid configuration: " + "; ".join(problems))

    def params(self) -> dict[str, Any]:
        """Generation parameters for the manifest."""
        data = asdict(self)
        for key in ("output", "overwrite"):
            data.pop(key)
        return data


def bucket_of(doc_id: str, num_buckets: int) -> int:
    """The bucket a document is filed under for random-B lookups."""
    return shard_index(f"bucket\x1f{doc_id}", num_buckets)


class _Tokenize(beam.DoFn):
    """Document rows → ``(doc_id, sentences as id lists)``; the tokenizer loads once per worker."""

    def __init__(self, vocab: str, cased: bool):
        self._vocab, self._cased = vocab, cased
        self._tokenizer: WordPieceTokenizer | None = None

    def setup(self) -> None:
        self._tokenizer = WordPieceTokenizer.load(self._vocab, cased=self._cased)
        # Corpus text that spells "[SEP]" is text, not a separator.
        self._tokenizer.tokenizer.encode_special_tokens = True

    def process(self, row: dict):
        sentences = [ids for ids in self._tokenizer.encode_batch(row["sentences"]) if ids]
        if sentences:
            yield row["doc_id"], sentences
        else:
            beam.metrics.Metrics.counter("pipelines.examples", "documents_without_tokens").inc()
            yield beam.pvalue.TaggedOutput("skipped", Counter(documents_without_tokens=1))


def draw_request(
    plan: PairPlan, own_bucket: int, bucket_sizes: dict[int, int], seed: int
) -> tuple[int, int] | None:
    """``(bucket, index)`` of the document B comes from: uniform over every other document."""
    buckets = sorted(bucket_sizes)
    sizes = [bucket_sizes[b] - (b == own_bucket) for b in buckets]
    total = sum(sizes)
    if total == 0:
        return None
    rng = seeded_rng(seed, plan.doc_id, plan.dupe_index, plan.pair_index, "random-b")
    target = rng.randrange(total)
    cumulative = []
    running = 0
    for size in sizes:
        running += size
        cumulative.append(running)
    position = bisect.bisect_right(cumulative, target)
    return buckets[position], target - (cumulative[position] - sizes[position])


def _plans(element, config: ExamplesConfig, bucket_sizes: dict[int, int]):
    doc_id, sentences = element
    own_bucket = bucket_of(doc_id, config.num_buckets)
    for dupe in range(config.dupe_factor):
        for plan in plan_pairs(doc_id, sentences, dupe, config.pairs, seeded_rng(config.seed, doc_id, dupe)):
            if not plan.is_random_next:
                yield beam.pvalue.TaggedOutput("ready", (plan, list(plan.tokens_b)))
                continue
            request = draw_request(plan, own_bucket, bucket_sizes, config.seed)
            if request is None:
                beam.metrics.Metrics.counter("pipelines.examples", "pairs_without_other_document").inc()
                yield beam.pvalue.TaggedOutput("skipped", Counter(pairs_without_other_document=1))
                continue
            bucket, index = request
            yield bucket, (index, plan)


def _fulfil(element, seed: int):
    _, grouped = element
    documents = sorted(grouped["documents"])
    for index, plan in grouped["requests"]:
        others = [d for d in documents if d[0] != plan.doc_id]
        _, sentences = others[index]
        rng = seeded_rng(seed, plan.doc_id, plan.dupe_index, plan.pair_index, "take-b")
        yield plan, take_random_b(sentences, plan.random_b_length, rng)


class _Finish(beam.DoFn):
    """Truncate, assemble and mask a pair into an example row."""

    def __init__(self, vocab: str, cased: bool, config: ExamplesConfig):
        self._vocab, self._cased, self._config = vocab, cased, config

    def setup(self) -> None:
        tokenizer = WordPieceTokenizer.load(self._vocab, cased=self._cased)
        self._tokens = tokenizer.vocab
        self._ids = {t: i for i, t in enumerate(tokenizer.vocab)}
        self._special = frozenset(SPECIAL_TOKENS)
        if self._config.random_token_from_whole_vocab:
            self._random_ids = list(range(len(self._tokens)))
        else:
            self._random_ids = [
                i
                for i, t in enumerate(self._tokens)
                if t not in self._special and not t.startswith("[unused")
            ]

    def process(self, element):
        plan, tokens_b = element
        config = self._config
        rng = seeded_rng(config.seed, plan.doc_id, plan.dupe_index, plan.pair_index, "finish")
        tokens_a = list(plan.tokens_a)
        truncated = truncate_pair(tokens_a, tokens_b, config.pairs.max_num_tokens, rng)
        ids, num_tokens_a = assemble(tokens_a, tokens_b, self._ids["[CLS]"], self._ids["[SEP]"])
        masked = mask_tokens(
            ids,
            [self._tokens[i] for i in ids],
            config=config.masking,
            mask_id=self._ids["[MASK]"],
            random_ids=self._random_ids,
            special=self._special,
            rng=rng,
        )
        yield {
            "input_ids": masked.input_ids,
            "masked_lm_positions": masked.positions,
            "masked_lm_ids": masked.labels,
            "next_sentence_labels": int(plan.is_random_next),
            "num_tokens_a": num_tokens_a,
            "num_tokens": len(ids),
            "doc_id": plan.doc_id,
            "dupe_index": plan.dupe_index,
            "_pair": plan.pair_index,
            "_truncated": truncated,
            "_unk": ids.count(self._ids["[UNK]"]),
            "_mask": sum(masked.input_ids[p] == self._ids["[MASK]"] for p in masked.positions),
            "_same": sum(masked.input_ids[p] == masked.labels[k] for k, p in enumerate(masked.positions)),
        }


def example_tally(row: dict) -> Counter:
    """What one example adds to ``stats.json``."""
    tally = Counter(
        examples=1,
        random_next=row["next_sentence_labels"],
        tokens=row["num_tokens"],
        predictions=len(row["masked_lm_positions"]),
        masked_to_mask=row["_mask"],
        masked_unchanged=row["_same"],
        truncated=int(row["_truncated"]),
        unk_tokens=row["_unk"],
    )
    tally[f"hist/{bucket_label(row['num_tokens'])}"] += 1
    return tally


def _stats(tally: Counter) -> dict[str, Any]:
    examples = tally["examples"]
    predictions = tally["predictions"]
    histogram = {k.split("/", 1)[1]: v for k, v in tally.items() if k.startswith("hist/")}
    return {
        "documents_used": tally["documents_used"],
        "skipped": {
            "documents_without_tokens": tally["documents_without_tokens"],
            "pairs_without_other_document": tally["pairs_without_other_document"],
        },
        "examples": examples,
        "random_next_rate": tally["random_next"] / examples if examples else None,
        "mask_rate": predictions / tally["tokens"] if tally["tokens"] else None,
        "masked_share_mask": tally["masked_to_mask"] / predictions if predictions else None,
        "masked_share_unchanged": tally["masked_unchanged"] / predictions if predictions else None,
        "masked_share_random": (predictions - tally["masked_to_mask"] - tally["masked_unchanged"])
        / predictions
        if predictions
        else None,
        "truncation_rate": tally["truncated"] / examples if examples else None,
        "unk_rate": tally["unk_tokens"] / tally["tokens"] if tally["tokens"] else None,
        "tokens": tally["tokens"],
        "length_histogram": dict(sorted(histogram.items(), key=lambda kv: int(kv[0].split("-")[0]))),
    }


def _finish_output(_, config: ExamplesConfig, vocab_sha256: str, entries: list[dict], tally: Counter) -> dict:
    stats = _stats(tally)
    shards = tuple(ShardEntry(**e) for e in entries)
    params = {**config.params(), "vocab_sha256": vocab_sha256}
    write_completion(
        config.output, stats, Manifest("examples", EXAMPLES_VERSION, "pipelines examples", params, shards)
    )
    return stats


def build(
    pipeline: beam.Pipeline, config: ExamplesConfig, manifest: Manifest, vocab_size: int, vocab_sha256: str
):
    """Add the examples stage to ``pipeline``."""
    shards = sorted((io.join(config.corpus, s.path), s.sha256) for s in manifest.shards_for(config.split))
    documents = (
        pipeline
        | "Corpus shards" >> beam.Create(shards)
        | "Spread shards" >> beam.Reshuffle()
        | "Read documents" >> beam.FlatMap(io.read_document_shard, ["doc_id", "sentences"])
        | "Tokenise"
        >> beam.ParDo(_Tokenize(config.vocab, config.cased)).with_outputs("skipped", main="documents")
    )
    skipped_documents = documents.skipped
    documents = documents.documents
    bucketed = documents | "Bucket" >> beam.Map(lambda d: (bucket_of(d[0], config.num_buckets), d))
    bucket_sizes = bucketed | "Bucket sizes" >> beam.combiners.Count.PerKey()
    planned = documents | "Plan pairs" >> beam.FlatMap(
        _plans, config, beam.pvalue.AsDict(bucket_sizes)
    ).with_outputs("ready", "skipped", main="requests")
    fulfilled = (
        {"documents": bucketed, "requests": planned.requests}
        | "Meet by bucket" >> beam.CoGroupByKey()
        | "Random B" >> beam.FlatMap(_fulfil, config.seed)
    )
    rows = (
        (planned.ready, fulfilled)
        | "All pairs" >> beam.Flatten()
        | "Finish" >> beam.ParDo(_Finish(config.vocab, config.cased, config))
    )
    fmt = examples_format(vocab_size)
    entries = rows | "Write" >> WriteShards(
        config.output,
        "examples",
        config.num_shards,
        fmt,
        lambda r: f"{r['doc_id']}\x1f{r['dupe_index']}\x1f{r['_pair']}",
        lambda r: (r["doc_id"], r["dupe_index"], r["_pair"]),
    )
    documents_used = documents | "Count documents" >> beam.combiners.Count.Globally()
    tally = (
        (
            rows | "Tally" >> beam.Map(example_tally),
            skipped_documents,
            planned.skipped,
            documents_used | "Documents tally" >> beam.Map(lambda n: Counter(documents_used=n)),
        )
        | "All tallies" >> beam.Flatten()
        | "Sum" >> beam.CombineGlobally(sum_tallies)
    )
    _ = (
        pipeline
        | "Finish output" >> beam.Create([None])
        | "Manifest"
        >> beam.Map(
            _finish_output, config, vocab_sha256, beam.pvalue.AsList(entries), beam.pvalue.AsSingleton(tally)
        )
    )
