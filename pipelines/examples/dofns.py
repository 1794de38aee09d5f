"""The DoFns of ``pipelines examples``: thin wrappers around the pure functions of ``batches.py``,
``packing.py`` and ``write.shard_pieces``, spilling to temporary files (``spill.py``). What one
DoFn holds at once is set here (``BATCH_SENTENCES``, ``SPILL_BYTES``, one bucket), not by the input.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pipelines import files
from pipelines.examples.batches import RequestDrawer, bucket_of, fulfil_bucket, plan_batch, tokenize_documents
from pipelines.examples.finish import ExampleColumns, ExampleVocab
from pipelines.examples.packing import pack_group
from pipelines.examples.pairs import TokenizedDocument
from pipelines.examples.spill import (
    documents_from_bytes,
    documents_to_bytes,
    read_spilled,
    requests_from_bytes,
    requests_to_bytes,
    spill,
)
from pipelines.examples.write import shard_pieces
from schemas import RecordFormat
from wordpiece.chunk_cache import ChunkCache
from wordpiece.tokenizer import WordPieceTokenizer

ExamplesConfig = Any
"""``pipeline.ExamplesConfig`` (not imported here: ``pipeline`` imports this module)."""

BATCH_SENTENCES = 20_000
"""Sentences tokenised and planned together (whole documents: at least one per batch)."""
SPILL_BYTES = 64 << 20
"""Example pieces a DoFn holds before it writes them to a temporary file."""
PLAN_SENTENCE_PASSES = 5 * BATCH_SENTENCES
"""Sentences x dupe passes planned at once, so the planner's memory does not grow with ``--dupe-factor``."""

BatchRef = tuple[tuple[int, tuple | bytes, int], ...]
"""A batch of documents by bucket: ``(bucket, where its documents lie (or their bytes), how many)``."""


class TokenizeShard(beam.DoFn):
    """A corpus shard → batches of ``TokenizedDocument`` by bucket (one ``BatchRef`` each)."""

    def __init__(self, tokens: tuple[str, ...], cased: bool, num_buckets: int, folder: str | None):
        self._tokens, self._cased, self._num_buckets, self._folder = tokens, cased, num_buckets, folder
        self._cache: ChunkCache | None = None

    def setup(self) -> None:
        tokenizer = WordPieceTokenizer(self._tokens, self._cased).tokenizer
        # Corpus text that spells "[SEP]" is text, not a separator.
        tokenizer.encode_special_tokens = True
        self._cache = ChunkCache(tokenizer)

    def process(self, shard: tuple[str, str]):
        tables = files.read_document_table(shard, ["doc_id", "sentences"])
        for batch in (batch for table in tables for batch in document_batches(table)):
            documents, without_tokens = tokenize_documents(self._cache, batch)
            yield beam.pvalue.TaggedOutput(
                "tallies", Counter(documents_used=len(documents), documents_without_tokens=without_tokens)
            )
            if documents:
                grouped = by_bucket(documents, self._num_buckets)
                refs = spill(self._folder, [(b, documents_to_bytes(d)) for b, d in grouped])
                yield tuple((b, ref, len(d)) for (b, ref), (_, d) in zip(refs, grouped, strict=True))


def document_batches(table: pa.Table) -> Iterator[pa.Table]:
    """A documents table in zero-copy slices of whole documents of about ``BATCH_SENTENCES`` sentences."""
    counts = np.asarray(pc.list_value_length(table.column("sentences")), dtype=np.int64)
    first, total = 0, 0
    for row, count in enumerate(counts.tolist()):
        total += count
        if total >= BATCH_SENTENCES:
            yield table.slice(first, row + 1 - first)
            first, total = row + 1, 0
    if first < table.num_rows:
        yield table.slice(first)


def plan_parts(documents: list[TokenizedDocument], dupe_factor: int) -> Iterator[list[TokenizedDocument]]:
    """``documents`` in parts of at most ``PLAN_SENTENCE_PASSES`` sentences x passes (a document
    at least); each document is planned from its own seed, so the parts change no example."""
    part, total = [], 0
    for document in documents:
        if part and total + document.num_sentences * dupe_factor > PLAN_SENTENCE_PASSES:
            yield part
            part, total = [], 0
        part.append(document)
        total += document.num_sentences * dupe_factor
    if part:
        yield part


def read_documents(pieces: Iterable[tuple | bytes], folder: str | None) -> list[TokenizedDocument]:
    """The tokenised documents of pieces written by ``documents_to_bytes`` (spilled or not)."""
    return [d for data in read_spilled(pieces, folder) for d in documents_from_bytes(data)]


class WithVocab(beam.DoFn):
    """A DoFn that builds the vocabulary tables once per worker and spills its examples."""

    def __init__(
        self, config: ExamplesConfig, fmt: RecordFormat, folder: str | None, tokens: tuple[str, ...]
    ):
        self._config, self._fmt, self._folder, self._tokens = config, fmt, folder, tokens
        self._vocab: ExampleVocab | None = None

    def setup(self) -> None:
        self._vocab = ExampleVocab.build(self._tokens, self._config.random_token_from_whole_vocab)

    def _pieces(self, finished: Iterable[tuple[ExampleColumns, Counter]]):
        """The examples as ``(shard, reference)`` outputs (written ``SPILL_BYTES`` at a time)."""
        held, held_bytes = [], 0
        for columns, tally in finished:
            for piece in shard_pieces(columns, self._fmt, self._config.num_shards):
                held.append(piece)
                held_bytes += len(piece[1])
            if held_bytes >= SPILL_BYTES:
                yield from (beam.pvalue.TaggedOutput("pieces", ref) for ref in spill(self._folder, held))
                held, held_bytes = [], 0
            yield beam.pvalue.TaggedOutput("tallies", tally)
        yield from (beam.pvalue.TaggedOutput("pieces", ref) for ref in spill(self._folder, held))


class PlanBatch(WithVocab):
    """A spilled batch of documents → its actual-next examples and its random-next requests, by bucket."""

    def __init__(
        self, config: ExamplesConfig, fmt: RecordFormat, folder: str | None, tokens: tuple[str, ...]
    ):
        super().__init__(config, fmt, folder, tokens)
        self._drawer: tuple[dict, RequestDrawer] | None = None

    def process(self, batch: BatchRef, bucket_sizes: dict[int, int]):
        if self._drawer is None or self._drawer[0] is not bucket_sizes:
            self._drawer = (bucket_sizes, RequestDrawer(bucket_sizes))
        config = self._config
        for part in plan_parts(
            read_documents((ref for _, ref, _ in batch), self._folder), config.dupe_factor
        ):
            finished, tally, requests = plan_batch(part, config, self._drawer[1], self._vocab)
            yield from self._pieces(finished)
            yield beam.pvalue.TaggedOutput("tallies", tally)
            yield from spill(self._folder, [(bucket, requests_to_bytes(r)) for bucket, r in requests])


class FulfilBucket(WithVocab):
    """A bucket's ``["documents" | "requests", reference]`` → the random-next examples."""

    def process(self, element):
        refs: dict[str, list] = {"documents": [], "requests": []}
        for kind, ref in element[1]:
            refs[kind].append(ref)
        documents = read_documents(refs["documents"], self._folder)
        requests = [requests_from_bytes(data) for data in read_spilled(refs["requests"], self._folder)]
        yield from self._pieces(fulfil_bucket(documents, requests, self._config, self._vocab))


def by_bucket(
    documents: list[TokenizedDocument], num_buckets: int
) -> list[tuple[int, list[TokenizedDocument]]]:
    """``documents`` grouped by their bucket (``bucket_of``), buckets in ascending order."""
    grouped: dict[int, list[TokenizedDocument]] = {}
    for document in documents:
        grouped.setdefault(bucket_of(document.doc_id, num_buckets), []).append(document)
    return sorted(grouped.items())


class PackGroup(WithVocab):
    """A group's documents (references) → its packed examples (``--format packed``)."""

    def process(self, element):
        group, refs = element
        config = self._config
        packed = pack_group(
            group,
            read_documents(refs, self._folder),
            seed=config.seed,
            dupe_factor=config.dupe_factor,
            max_seq_length=config.pairs.max_seq_length,
            masking=config.masking if config.apply_masking else None,
            vocab=self._vocab,
        )
        yield from self._pieces(packed)
