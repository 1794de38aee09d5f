"""``pipelines examples`` on a batch of documents at a time (pure functions): tokenise, plan every
pass, finish the actual-next pairs, request random B's by bucket (:class:`RequestDrawer`) and cut
them from a bucket's documents (:func:`fulfil_bucket`), pairs as arrays throughout."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines.examples.finish import ExampleColumns, ExampleVocab, PairBatch, finish_pairs
from pipelines.examples.pairs import PairConfig, PairCuts, TokenizedDocument, plan_cuts, seeded_generator
from pipelines.stage import shard_index
from wordpiece.chunk_cache import ChunkCache, ragged_gather
from wordpiece.masking import MaskingConfig

FINISH_BATCH = 16384
"""Pairs finished (truncated, assembled, masked) together; any size gives the same rows."""


def bucket_of(doc_id: str, num_buckets: int) -> int:
    """The bucket a document is filed under for random-B lookups."""
    return shard_index(f"bucket\x1f{doc_id}", num_buckets)


def tokenize_documents(cache: ChunkCache, table: pa.Table) -> tuple[list[TokenizedDocument], int]:
    """The documents of a table (``doc_id``, ``sentences``) with tokens, and how many had none."""
    sentences = table.column("sentences").combine_chunks()
    ids, lengths = cache.encode(pc.list_flatten(sentences))
    ends = np.cumsum(lengths)
    documents, without_tokens = [], 0
    bounds = np.asarray(sentences.offsets, dtype=np.int64)
    bounds = bounds - bounds[0]  # a sliced table's offsets start past zero
    for doc_id, first, last in zip(
        table.column("doc_id").to_pylist(), bounds[:-1].tolist(), bounds[1:].tolist(), strict=True
    ):
        kept = lengths[first:last]
        kept = kept[kept > 0]
        if len(kept):
            start = int(ends[first] - lengths[first])
            offsets = np.zeros(len(kept) + 1, dtype=np.int64)
            np.cumsum(kept, out=offsets[1:])
            documents.append(TokenizedDocument(doc_id, ids[start : start + int(offsets[-1])], offsets))
        else:
            without_tokens += 1
    return documents, without_tokens


class RequestDrawer:
    """Which document a random B comes from: uniform over every document but the requester's (a
    bucket by its share of documents, then an index among that bucket's other documents)."""

    def __init__(self, bucket_sizes: dict[int, int]):
        self.buckets = np.array(sorted(bucket_sizes), dtype=np.int64)
        self.cumulative = np.cumsum([bucket_sizes[b] for b in self.buckets.tolist()]).astype(np.int64)

    def draw(
        self, own_buckets: np.ndarray, document_draws: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """``(bucket, index)`` arrays for uniform draws of requesters in ``own_buckets`` among the other
        ``total - 1`` documents (mapped back by skipping the requester's own), or None when there is none."""
        total = int(self.cumulative[-1]) - 1 if len(self.cumulative) else 0
        if total <= 0:
            return None
        own = np.searchsorted(self.buckets, own_buckets)
        starts = np.concatenate(([0], self.cumulative))  # where each bucket's documents start
        targets = (np.asarray(document_draws) * total).astype(np.int64)
        positions = np.searchsorted(self.cumulative, targets + (targets >= starts[own]), side="right")
        before = starts[positions] - (positions > own)
        return self.buckets[positions], targets - before


class Requests(NamedTuple):
    """Random-next pairs waiting for their B, as arrays; A is ``a_tokens`` cut by ``a_length``."""

    doc_ids: np.ndarray
    dupe_index: np.ndarray
    pair_index: np.ndarray
    keys: np.ndarray
    random_b_length: np.ndarray
    sentence_draws: np.ndarray
    index: np.ndarray
    """Which document of the bucket, counted in doc_id order with the requester's own left out."""
    a_length: np.ndarray
    a_tokens: np.ndarray

    @classmethod
    def concatenate(cls, parts: Sequence[Requests]) -> Requests:
        """Several request batches as one."""
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in cls._fields))


def _plan_passes(
    documents: Sequence[TokenizedDocument], dupe_factor: int, seed: int, pairs: PairConfig, num_buckets: int
) -> tuple[PairBatch, PairCuts, np.ndarray]:
    """Every pass of every document: the pairs as one :class:`PairBatch`, their cuts and own buckets."""
    bases = np.cumsum([0] + [len(d.tokens) for d in documents])
    cuts, labels = [], []  # labels: document number, dupe index, pair index and own bucket per pair
    for number, document in enumerate(documents):
        bucket, base = bucket_of(document.doc_id, num_buckets), bases[number]
        for dupe in range(dupe_factor):
            c = plan_cuts(document, pairs, seeded_generator(seed, document.doc_id, dupe))
            cuts.append(c._replace(a_start=c.a_start + base, a_end=c.a_end + base, b_end=c.b_end + base))
            n = len(c.keys)
            labels.append(np.stack([np.full(n, number), np.full(n, dupe), np.arange(n), np.full(n, bucket)]))
    c = PairCuts(*(np.concatenate(column) for column in zip(*cuts, strict=True)))
    number, dupe, pair, own = np.concatenate(labels, axis=1)
    doc_ids = np.array([d.doc_id for d in documents], dtype=object)[number]
    pool = np.concatenate([d.tokens for d in documents])
    a_length, b_length, random_next = c.a_end - c.a_start, c.b_end - c.a_end, c.random_b_length > 0
    batch = PairBatch(pool, c.a_start, a_length, c.a_end, b_length, c.keys, random_next, doc_ids, dupe, pair)
    return batch, c, own


def finish_in_batches(
    batch: PairBatch, pairs: PairConfig, masking: MaskingConfig | None, vocab: ExampleVocab
) -> Iterator[tuple[ExampleColumns, Counter]]:
    """:func:`finish_pairs` over ``FINISH_BATCH`` pairs at a time."""
    for first in range(0, len(batch.keys), FINISH_BATCH):
        yield finish_pairs(
            batch.take(slice(first, first + FINISH_BATCH)), pairs.max_num_tokens, masking, vocab
        )


def plan_batch(
    documents: Sequence[TokenizedDocument],
    config,
    drawer: RequestDrawer,
    vocab: ExampleVocab,
) -> tuple[list[tuple[ExampleColumns, Counter]], Counter, list[tuple[int, Requests]]]:
    """Every dupe pass of a batch of documents (``config`` an ``ExamplesConfig``): the finished
    actual-next examples with their tallies, what else goes to ``stats.json`` (the random-next
    pairs with no other document to draw from), and the random-next requests by bucket."""
    batch, cuts, own = _plan_passes(
        documents, config.dupe_factor, config.seed, config.pairs, config.num_buckets
    )
    masking = config.masking if config.apply_masking else None
    finished = list(finish_in_batches(batch.take(~batch.random_next), config.pairs, masking, vocab))
    tally: Counter = Counter()
    random = np.flatnonzero(batch.random_next)
    if not len(random):
        return finished, tally, []
    drawn = drawer.draw(own[random], cuts.document_draws[random])
    if drawn is None:
        tally["pairs_without_other_document"] += len(random)
        return finished, tally, []
    buckets, index = drawn
    order = np.argsort(buckets, kind="stable")
    random, buckets, index = random[order], buckets[order], index[order]
    firsts = np.flatnonzero(np.diff(buckets, prepend=-1))
    requests = []
    for first, end in zip(firsts.tolist(), np.append(firsts[1:], len(buckets)).tolist(), strict=True):
        rows = random[first:end]
        requests.append(
            (
                int(buckets[first]),
                Requests(
                    batch.doc_ids[rows],
                    batch.dupe_index[rows],
                    batch.pair_index[rows],
                    batch.keys[rows],
                    cuts.random_b_length[rows],
                    cuts.sentence_draws[rows],
                    index[first:end],
                    batch.a_length[rows],
                    ragged_gather(batch.pool, batch.a_start[rows], batch.a_length[rows]),
                ),
            )
        )
    return finished, tally, requests


def fulfil_bucket(
    documents: Iterable[TokenizedDocument],
    requests: Iterable[Requests],
    config,
    vocab: ExampleVocab,
) -> Iterator[tuple[ExampleColumns, Counter]]:
    """Cut each request's B from its document of this bucket (its index counts the bucket's
    documents in ``doc_id`` order, its own left out): whole sentences from a random one until
    ``random_b_length`` tokens; the pairs finished in batches."""
    documents = sorted(documents, key=lambda d: d.doc_id)
    requests = list(requests)
    if not requests or not documents:
        return
    wanted = Requests.concatenate(requests)
    position = {d.doc_id: i for i, d in enumerate(documents)}
    own = np.fromiter(
        (position.get(d, len(documents)) for d in wanted.doc_ids.tolist()), np.int64, len(wanted.index)
    )
    target = wanted.index + (wanted.index >= own)
    # The bucket's documents back to back after the requests' A sides; sentence boundaries of
    # document d are boundaries[first[d]:first[d] + num_sentences[d] + 1].
    a_total = len(wanted.a_tokens)
    pool = np.concatenate([wanted.a_tokens, *(d.tokens for d in documents)])
    bases = a_total + np.cumsum([0] + [len(d.tokens) for d in documents])[:-1]
    boundaries = np.concatenate([d.offsets + base for d, base in zip(documents, bases.tolist(), strict=True)])
    num_sentences = np.array([d.num_sentences for d in documents], dtype=np.int64)
    first = np.cumsum(num_sentences + 1) - (num_sentences + 1)
    start_sentence = first[target] + (wanted.sentence_draws * num_sentences[target]).astype(np.int64)
    b_start = boundaries[start_sentence]
    last = np.searchsorted(boundaries, b_start + wanted.random_b_length, side="left")
    last = np.minimum(last, first[target] + num_sentences[target])
    batch = PairBatch(
        pool,
        np.cumsum(wanted.a_length) - wanted.a_length,
        wanted.a_length,
        b_start,
        boundaries[last] - b_start,
        wanted.keys,
        np.ones(len(wanted.keys), dtype=bool),
        wanted.doc_ids,
        wanted.dupe_index,
        wanted.pair_index,
    )
    masking = config.masking if config.apply_masking else None
    finished = finish_in_batches(batch, config.pairs, masking, vocab)
    columns, tally = next(finished)
    # doc_id is a hash of the text: a B from another document with A's doc_id is a copy of A's text.
    doc_ids = np.array([d.doc_id for d in documents], dtype=object)
    tally["random_next_same_text"] = int(np.count_nonzero(doc_ids[target] == wanted.doc_ids))
    yield columns, tally
    yield from finished


MAX_SAME_TEXT_SHARE = 0.1
"""Above this share of random-next B's from a copy of A's own document, ``pipelines examples`` warns."""


MAX_NSP_IMBALANCE = 0.25
"""Random next sentences further than this from half of the examples: ``pipelines examples`` warns."""


def random_next_warning(stats: dict) -> str | None:
    """The warning for an examples run whose NSP labels mean little: far from balanced (documents of
    one sentence; too few documents to draw a random next sentence from), or random next sentences
    mostly from copies of the same text; None otherwise."""
    rate, skipped = stats.get("random_next_rate"), stats["skipped"]["pairs_without_other_document"]
    if rate is not None and abs(rate - 0.5) > MAX_NSP_IMBALANCE:
        why = (
            f", and {skipped:,} pairs skipped for want of another document to draw a random next sentence "
            "from: give the text as many documents (a blank line between documents in `pipelines text`)"
            if skipped
            else ": the documents are too short to take a next sentence from their own text (one sentence "
            "each?): give documents of several sentences"
        )
        return f"random next {rate:.2f} (0.50 is balanced){why}; or use --format packed (no next sentence prediction)"
    share = stats.get("random_next_same_text_share")
    if share is None or share <= MAX_SAME_TEXT_SHARE:
        return None
    return (
        f"random-next share {1 - share:.2f}: {share:.0%} of the random next sentences come from copies "
        "of their own document, too few distinct documents for next sentence prediction "
        "(`pipelines corpus` removes duplicates)"
    )
