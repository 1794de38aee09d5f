"""``pipelines examples``: corpus documents + a vocabulary → masked, NSP-paired example shards.

Graph (no worker ever holds the corpus):

1. Read the split's document shards and tokenise each sentence (literal ``[SEP]`` text stays
   text). Documents are keyed by a bucket, ``hash(doc_id) mod num_buckets``.
2. Count documents per bucket (a small side input).
3. Per document and dupe pass, ``plan_pairs`` (one generator seeded by (seed, document,
   pass); each pair gets a 64-bit key from it for everything decided later). Actual-next
   pairs are finished there, a document's at once. A pair whose B must come from another
   document becomes a request: a bucket drawn with probability proportional to its
   documents (the requester's own document left out) and an index inside it, so every other
   document is equally likely, as in the reference, and never the requester's own.
4. Requests and documents meet by bucket (``CoGroupByKey``); ``take_random_b`` cuts B.
5. ``finish_pairs`` truncates, assembles and (unless ``--no-masking``) masks a batch of pairs
   with array operations; each pair's draws are hashes of its key, so batching changes nothing.
6. Examples are written by ``WriteShards`` (shard chosen by a hash of the pair's identity,
   rows sorted), then ``length_histogram.png``, ``index.json`` (every record batch's byte range,
   rows and SHA-256, taken from the bytes as they are written; ``schemas.index``), ``stats.json``,
   ``manifest.json`` (with the vocabulary's SHA-256 and the index's) and ``COMPLETED``.
"""

from __future__ import annotations

import io as bytes_io
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import apache_beam as beam
import numpy as np

from pipelines import io
from pipelines.examples.pairs import (
    PairConfig,
    PairPlan,
    TokenizedDocument,
    plan_pairs,
    seeded_generator,
    take_random_b,
    tokenized_document,
    truncate_pairs,
)
from pipelines.stage import WriteShards, shard_index, write_completion, write_stats
from pipelines.stats import bucket_label, sum_tallies
from schemas import (
    Manifest,
    RecordFormat,
    ShardEntry,
    absolute_reference,
)
from schemas.examples import EXAMPLES_VERSION, examples_format
from schemas.index import INDEX_FILE, ShardIndex, index_reference
from wordpiece.masking import MaskingConfig, MaskingVocab, mask_batch
from wordpiece.tokenizer import SPECIAL_TOKENS, WordPieceTokenizer

LENGTH_HISTOGRAM_FILE = "length_histogram.png"
FINISH_BATCH = 4096
"""Pairs finished (truncated, assembled, masked) together; any size gives the same rows."""


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
    apply_masking: bool = True
    """False (``--no-masking``): input_ids are the original tokens and no position is chosen,
    for trainers that mask dynamically."""
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
        for key in ("output", "overwrite", "apply_masking"):
            data.pop(key)
        # What dynamic masking in ``pretrain`` re-applies unless its flags override it.
        data["masking_settings"] = asdict(self.masking)
        data["corpus"], data["vocab"] = absolute_reference(self.corpus), absolute_reference(self.vocab)
        if not self.apply_masking:
            data["masking"] = False  # these shards carry no masks
        return data


def bucket_of(doc_id: str, num_buckets: int) -> int:
    """The bucket a document is filed under for random-B lookups."""
    return shard_index(f"bucket\x1f{doc_id}", num_buckets)


def tokenize_document(
    tokenizer: WordPieceTokenizer, doc_id: str, sentences: Sequence[str]
) -> TokenizedDocument:
    """A document's sentences as ids, tokenised once for every dupe pass (empty ones left out)."""
    return tokenized_document(doc_id, tokenizer.encode_batch(sentences))


@dataclass(frozen=True)
class ExampleVocab:
    """The ids and tables that finishing pairs needs, built once per worker."""

    cls_id: int
    sep_id: int
    unk_id: int
    masking: MaskingVocab

    @classmethod
    def build(cls, tokens: Sequence[str], random_token_from_whole_vocab: bool) -> ExampleVocab:
        """Tables for the vocabulary ``tokens`` (in id order)."""
        special = frozenset(SPECIAL_TOKENS)
        if random_token_from_whole_vocab:
            random_ids = range(len(tokens))
        else:
            random_ids = [i for i, t in enumerate(tokens) if t not in special and not t.startswith("[unused")]
        return cls(
            cls_id=tokens.index("[CLS]"),
            sep_id=tokens.index("[SEP]"),
            unk_id=tokens.index("[UNK]"),
            masking=MaskingVocab.build(tokens, random_ids),
        )


class RequestDrawer:
    """Which document a random B comes from: uniform over every document but the requester's.

    Documents are filed into buckets (``bucket_of``); a draw picks a bucket with probability
    proportional to its documents (the requester's own left out) and an index among that
    bucket's other documents.
    """

    def __init__(self, bucket_sizes: dict[int, int]):
        self.buckets = np.array(sorted(bucket_sizes), dtype=np.int64)
        self.cumulative = np.cumsum([bucket_sizes[b] for b in self.buckets.tolist()])

    def draw(self, own_bucket: int, document_draws: Sequence[float]) -> list[tuple[int, int]] | None:
        """``(bucket, index)`` for each uniform draw of one requester, or None without another document."""
        own = int(np.searchsorted(self.buckets, own_bucket))
        cumulative = self.cumulative - (np.arange(len(self.buckets)) >= own)
        total = int(cumulative[-1])
        if total == 0:
            return None
        targets = (np.asarray(document_draws) * total).astype(np.int64)
        positions = np.searchsorted(cumulative, targets, side="right")
        before = np.concatenate(([0], cumulative))[positions]
        return list(zip(self.buckets[positions].tolist(), (targets - before).tolist(), strict=True))


def finish_pairs(
    plans: Sequence[PairPlan], tokens_b: Sequence[np.ndarray], config: ExamplesConfig, vocab: ExampleVocab
) -> tuple[list[dict], Counter]:
    """Truncate, assemble and (unless ``config.apply_masking`` is off) mask a batch of pairs.

    Returns the example rows and what they add to ``stats.json``. Every pair's randomness comes
    from its key, so the rows do not depend on how pairs are batched.
    """
    n = len(plans)
    len_a = np.fromiter((len(p.tokens_a) for p in plans), np.int64, n)
    len_b = np.fromiter((len(b) for b in tokens_b), np.int64, n)
    keys = np.fromiter((p.key for p in plans), np.uint64, n)
    a_front, a_back, b_front, b_back = truncate_pairs(len_a, len_b, keys, config.pairs.max_num_tokens)
    a_stop, b_stop = len_a - a_back, len_b - b_back
    cls_, sep = np.array([vocab.cls_id], np.int32), np.array([vocab.sep_id], np.int32)
    pieces = []
    for plan, b, a0, a1, b0, b1 in zip(
        plans, tokens_b, a_front.tolist(), a_stop.tolist(), b_front.tolist(), b_stop.tolist(), strict=True
    ):
        pieces += (cls_, plan.tokens_a[a0:a1], sep, b[b0:b1], sep)
    ids = np.concatenate(pieces) if pieces else np.zeros(0, np.int32)
    num_tokens_a = a_stop - a_front + 2
    lengths = num_tokens_a + b_stop - b_front + 1
    starts = np.cumsum(lengths) - lengths
    tally = Counter(
        examples=n,
        random_next=sum(p.random_b_length > 0 for p in plans),
        tokens=int(lengths.sum()),
        truncated=int(np.count_nonzero(a_front + a_back + b_front + b_back)),
        unk_tokens=int(np.count_nonzero(ids == vocab.unk_id)),
    )
    values, counts = np.unique(lengths, return_counts=True)
    for value, count in zip(values.tolist(), counts.tolist(), strict=True):
        tally[f"hist/{bucket_label(value)}"] += count
    if config.apply_masking:
        masked = mask_batch(ids, starts, lengths, keys, config.masking, vocab.masking)
        output, positions, labels = masked.input_ids, masked.positions, masked.labels
        prediction_ends = np.cumsum(masked.num_predictions).tolist()
        tally.update(
            predictions=len(positions),
            masked_to_mask=int(masked.num_to_mask.sum()),
            masked_unchanged=int(masked.num_unchanged.sum()),
        )
    else:
        output, positions, labels, prediction_ends = ids, ids[:0], ids[:0], [0] * n
    # Rows hold views of the batch's arrays (pyarrow converts them, checking each id fits).
    rows = []
    prediction_start = 0
    for plan, start, length, length_a, prediction_end in zip(
        plans, starts.tolist(), lengths.tolist(), num_tokens_a.tolist(), prediction_ends, strict=True
    ):
        rows.append(
            {
                "input_ids": output[start : start + length],
                "masked_lm_positions": positions[prediction_start:prediction_end],
                "masked_lm_ids": labels[prediction_start:prediction_end],
                "next_sentence_labels": int(plan.random_b_length > 0),
                "num_tokens_a": length_a,
                "num_tokens": length,
                "doc_id": plan.doc_id,
                "dupe_index": plan.dupe_index,
                "_pair": plan.pair_index,
            }
        )
        prediction_start = prediction_end
    return rows, tally


def _finish_in_batches(pairs: list[tuple[PairPlan, np.ndarray]], config: ExamplesConfig, vocab: ExampleVocab):
    for first in range(0, len(pairs), FINISH_BATCH):
        batch = pairs[first : first + FINISH_BATCH]
        yield finish_pairs([p for p, _ in batch], [b for _, b in batch], config, vocab)


def plan_document(
    document: TokenizedDocument, config: ExamplesConfig, drawer: RequestDrawer, vocab: ExampleVocab
) -> tuple[list[dict], Counter, list[tuple[int, tuple[int, PairPlan]]]]:
    """Every dupe pass of one document: the rows of its actual-next pairs, their tally (with
    the random-next pairs that have no other document to draw from), and the random-next
    requests as ``(bucket, (index in bucket, plan))``."""
    own_bucket = bucket_of(document.doc_id, config.num_buckets)
    ready: list[tuple[PairPlan, np.ndarray]] = []
    random_next: list[PairPlan] = []
    for dupe in range(config.dupe_factor):
        for plan in plan_pairs(
            document, dupe, config.pairs, seeded_generator(config.seed, document.doc_id, dupe)
        ):
            if plan.is_random_next:
                random_next.append(plan)
            else:
                ready.append((plan, plan.tokens_b))
    rows: list[dict] = []
    tally: Counter = Counter()
    for batch_rows, batch_tally in _finish_in_batches(ready, config, vocab):
        rows.extend(batch_rows)
        tally.update(batch_tally)
    requests = []
    if random_next:
        targets = drawer.draw(own_bucket, [p.document_draw for p in random_next])
        if targets is None:
            tally["pairs_without_other_document"] += len(random_next)
        else:
            requests = [
                (bucket, (index, plan)) for (bucket, index), plan in zip(targets, random_next, strict=True)
            ]
    return rows, tally, requests


def fulfil_bucket(
    documents: Iterable[TokenizedDocument],
    requests: Iterable[tuple[int, PairPlan]],
    config: ExamplesConfig,
    vocab: ExampleVocab,
) -> Iterable[tuple[list[dict], Counter]]:
    """Cut each request's B from its document of this bucket and finish the pairs, in batches.

    A request's index counts the bucket's documents in ``doc_id`` order, its own left out.
    """
    documents = sorted(documents, key=lambda d: d.doc_id)
    position = {d.doc_id: i for i, d in enumerate(documents)}
    offsets: dict[int, list[int]] = {}
    pairs = []
    for index, plan in sorted(requests, key=lambda r: (r[1].doc_id, r[1].dupe_index, r[1].pair_index)):
        own = position.get(plan.doc_id)
        if own is not None and index >= own:
            index += 1
        if index not in offsets:
            offsets[index] = documents[index].offsets.tolist()
        tokens_b = take_random_b(
            documents[index].tokens, offsets[index], plan.random_b_length, plan.sentence_draw
        )
        pairs.append((plan, tokens_b))
    yield from _finish_in_batches(pairs, config, vocab)


class _Tokenize(beam.DoFn):
    """Document rows → ``TokenizedDocument``; the tokenizer loads once per worker."""

    def __init__(self, vocab: str, cased: bool):
        self._vocab, self._cased = vocab, cased
        self._tokenizer: WordPieceTokenizer | None = None

    def setup(self) -> None:
        self._tokenizer = WordPieceTokenizer.load(self._vocab, cased=self._cased)
        # Corpus text that spells "[SEP]" is text, not a separator.
        self._tokenizer.tokenizer.encode_special_tokens = True

    def process(self, row: dict):
        document = tokenize_document(self._tokenizer, row["doc_id"], row["sentences"])
        if document.num_sentences:
            yield document
        else:
            beam.metrics.Metrics.counter("pipelines.examples", "documents_without_tokens").inc()
            yield beam.pvalue.TaggedOutput("tallies", Counter(documents_without_tokens=1))


class _WithVocab(beam.DoFn):
    """A DoFn that loads the vocabulary tables once per worker."""

    def __init__(self, config: ExamplesConfig):
        self._config = config
        self._vocab: ExampleVocab | None = None

    def setup(self) -> None:
        tokens = WordPieceTokenizer.load(self._config.vocab, cased=self._config.cased).vocab
        self._vocab = ExampleVocab.build(tokens, self._config.random_token_from_whole_vocab)


class _PlanDocument(_WithVocab):
    """A document → its actual-next examples (finished here) and its random-next requests."""

    def __init__(self, config: ExamplesConfig):
        super().__init__(config)
        self._drawer: tuple[dict, RequestDrawer] | None = None

    def process(self, document: TokenizedDocument, bucket_sizes: dict[int, int]):
        if self._drawer is None or self._drawer[0] is not bucket_sizes:
            self._drawer = (bucket_sizes, RequestDrawer(bucket_sizes))
        rows, tally, requests = plan_document(document, self._config, self._drawer[1], self._vocab)
        if tally["pairs_without_other_document"]:
            beam.metrics.Metrics.counter("pipelines.examples", "pairs_without_other_document").inc(
                tally["pairs_without_other_document"]
            )
        for row in rows:
            yield beam.pvalue.TaggedOutput("rows", row)
        yield beam.pvalue.TaggedOutput("tallies", tally)
        yield from requests


class _FulfilBucket(_WithVocab):
    """A bucket's documents and the requests for them → the random-next examples."""

    def process(self, element):
        _, grouped = element
        for rows, tally in fulfil_bucket(
            grouped["documents"], grouped["requests"], self._config, self._vocab
        ):
            yield from rows
            yield beam.pvalue.TaggedOutput("tallies", tally)


def _stats(tally: Counter, apply_masking: bool) -> dict[str, Any]:
    examples = tally["examples"]
    predictions = tally["predictions"]
    histogram = {k.split("/", 1)[1]: v for k, v in tally.items() if k.startswith("hist/")}

    def share(count: int) -> float | None:
        return count / predictions if predictions else None

    return {
        "documents_used": tally["documents_used"],
        "skipped": {
            "documents_without_tokens": tally["documents_without_tokens"],
            "pairs_without_other_document": tally["pairs_without_other_document"],
        },
        "examples": examples,
        "random_next_rate": tally["random_next"] / examples if examples else None,
        "masking": apply_masking,
        "mask_rate": predictions / tally["tokens"] if tally["tokens"] else None,
        # Without masking there is no 80/10/10 split to report: null, not made-up numbers.
        "masked_share_mask": share(tally["masked_to_mask"]),
        "masked_share_unchanged": share(tally["masked_unchanged"]),
        "masked_share_random": share(predictions - tally["masked_to_mask"] - tally["masked_unchanged"]),
        "truncation_rate": tally["truncated"] / examples if examples else None,
        "unk_rate": tally["unk_tokens"] / tally["tokens"] if tally["tokens"] else None,
        "tokens": tally["tokens"],
        "length_histogram": dict(sorted(histogram.items(), key=lambda kv: int(kv[0].split("-")[0]))),
    }


def length_histogram_png(histogram: dict[str, int], max_seq_length: int) -> bytes:
    """The ``length_histogram`` of ``stats.json`` as a bar chart: PNG bytes, the same bytes for the
    same histogram (no time or version stamped in)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 3.5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    labels = list(histogram)
    axes.bar(range(len(labels)), [histogram[k] for k in labels], color="#4c72b0")
    axes.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=8)
    axes.set_xlabel("tokens per example ([CLS] A [SEP] B [SEP])")
    axes.set_ylabel("examples")
    axes.set_title(f"Example lengths (max_seq_length {max_seq_length})")
    figure.tight_layout()
    buffer = bytes_io.BytesIO()
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def _finish_output(
    _, config: ExamplesConfig, fmt: RecordFormat, vocab_sha256: str, entries: list[dict], tally: Counter
) -> dict:
    stats = _stats(tally, config.apply_masking)
    if not stats["examples"]:
        write_stats(config.output, stats)  # Empty is an error: stats.json explains, no COMPLETED.
        return stats
    entries = [dict(e) for e in entries]
    index = ShardIndex(fmt.name, fmt.version, fmt.schema, tuple(e.pop("index") for e in entries))
    shards = tuple(ShardEntry(**e) for e in entries)
    params = {**config.params(), "vocab_sha256": vocab_sha256}
    png = length_histogram_png(stats["length_histogram"], config.pairs.max_seq_length)
    io.write_bytes(io.join(config.output, LENGTH_HISTOGRAM_FILE), png)
    index_json = index.to_json()
    io.write_bytes(io.join(config.output, INDEX_FILE), index_json.encode("utf-8"))
    manifest = Manifest(
        "examples", EXAMPLES_VERSION, "pipelines examples", params, shards, index=index_reference(index_json)
    )
    write_completion(config.output, stats, manifest)
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
        >> beam.ParDo(_Tokenize(config.vocab, config.cased)).with_outputs("tallies", main="documents")
    )
    bucketed = documents.documents | "Bucket" >> beam.Map(
        lambda d: (bucket_of(d.doc_id, config.num_buckets), d)
    )
    bucket_sizes = bucketed | "Bucket sizes" >> beam.combiners.Count.PerKey()
    planned = documents.documents | "Plan pairs" >> beam.ParDo(
        _PlanDocument(config), beam.pvalue.AsDict(bucket_sizes)
    ).with_outputs("rows", "tallies", main="requests")
    fulfilled = (
        {"documents": bucketed, "requests": planned.requests}
        | "Meet by bucket" >> beam.CoGroupByKey()
        | "Random B" >> beam.ParDo(_FulfilBucket(config)).with_outputs("tallies", main="rows")
    )
    rows = (planned.rows, fulfilled.rows) | "All rows" >> beam.Flatten()
    fmt = examples_format(vocab_size)
    entries = rows | "Write" >> WriteShards(
        config.output,
        "examples",
        config.num_shards,
        fmt,
        lambda r: f"{r['doc_id']}\x1f{r['dupe_index']}\x1f{r['_pair']}",
        lambda r: (r["doc_id"], r["dupe_index"], r["_pair"]),
        with_index=True,
    )
    documents_used = documents.documents | "Count documents" >> beam.combiners.Count.Globally()
    tally = (
        (
            documents.tallies,
            planned.tallies,
            fulfilled.tallies,
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
            _finish_output,
            config,
            fmt,
            vocab_sha256,
            beam.pvalue.AsList(entries),
            beam.pvalue.AsSingleton(tally),
        )
    )
