"""``pipelines corpus``: merge document outputs, drop exact and near duplicates, split by document id.

Every grouping is a ``GroupOnDisk`` (a local runner groups on disk): documents by id (exact
duplicates), document ids by MinHash band (the pairs to compare), each compared document's
signature to the documents that asked for it, and a document with the signatures it is compared
with (near duplicates); a whole bucket or corpus is never held.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterator

import apache_beam as beam
import numpy as np

from pipelines import files
from pipelines.config import CorpusConfig
from pipelines.corpus.dedup import MAX_BUCKET_COMPARISONS, band_keys, estimated_jaccard, minhash_signature
from pipelines.corpus.split import assign_split
from pipelines.progress import ShowProgress
from pipelines.shuffle import GroupOnDisk
from pipelines.stage import DOCUMENT, DROPPED, CountRecords, Outcome, WriteStageOutput, document_sort_key
from pipelines.stats import sum_tallies
from schemas import Manifest, absolute_reference, storage


def keep_one_of_each(_: str, rows: Iterator[dict]) -> Iterator[Outcome]:
    """Of documents sharing a ``doc_id`` (in sort order), keep the first and drop the others."""
    yield Outcome(DOCUMENT, "", next(rows))
    dropped = [Outcome(DROPPED, "exact_duplicate") for _ in rows]
    if dropped:  # the largest group of one id, for stats.json
        dropped[0] = Outcome(DROPPED, "exact_duplicate", counts={"largest_id_group": len(dropped) + 1})
    yield from dropped


def _signature(hex_digits: str) -> np.ndarray:
    return np.frombuffer(bytes.fromhex(hex_digits), dtype=np.uint32)


def pairs_in_bucket(_: str, doc_ids: Iterator[str]) -> Iterator[tuple[str, list] | Counter]:
    """A band bucket's pairs to compare, each document (ids ascending) with each of the at most
    ``MAX_BUCKET_COMPARISONS`` before it, keyed by the earlier one; the bucket's size when over one."""
    window: deque[str] = deque(maxlen=MAX_BUCKET_COMPARISONS)
    size = 0
    for doc_id in doc_ids:
        yield from ((earlier, ["want", doc_id]) for earlier in window)
        window.append(doc_id)
        size += 1
    if size > 1:
        yield Counter(largest_band_bucket=size)


def offer_signature(earlier: str, values: Iterator[list]) -> Iterator[tuple[str, list]]:
    """The signature of ``earlier`` to each document that compares itself with it."""
    signature = None
    for kind, value in values:  # its "sig" first, then each "want"
        if kind == "sig":
            signature = value
        else:
            yield value, ["near", earlier, signature]


def mark_or_keep(_: str, values: Iterator[list], threshold: float) -> Iterator[Outcome]:
    """A document, or its drop when a signature it was compared with is ``threshold`` similar."""
    compared = []
    for kind, value, signature in values:  # every "near" (value: the earlier id) first, then the "row"
        compared.append(_signature(signature))
        if kind == "row":
            near = any(estimated_jaccard(compared[-1], other) >= threshold for other in compared[:-1])
            yield Outcome(DROPPED, "near_duplicate") if near else Outcome(DOCUMENT, "", value)


def near_duplicates(unique: beam.PCollection, config: CorpusConfig, out: storage.Folder):
    """``unique`` documents, near duplicates dropped (MinHash, LSH bands), and the band buckets' tally;
    groupings spill under ``out``."""
    bands, rows_per_band = config.minhash_bands, config.minhash_rows
    signed = unique | "MinHash" >> beam.Map(
        lambda o: (
            o.row,
            minhash_signature(o.row["sentences"], config.shingle_words, config.num_permutations),
        )
    )
    bucketed = (
        signed
        | "Band keys"
        >> beam.FlatMapTuple(
            lambda row, sig: [(k, row["doc_id"]) for k in band_keys(sig, bands, rows_per_band)]
        )
        | "Group by band" >> GroupOnDisk(pairs_in_bucket, out, order=lambda doc_id: doc_id)
        | "Pairs or sizes" >> beam.Partition(lambda e, _: int(isinstance(e, Counter)), 2)
    )
    signatures = signed | "Signatures" >> beam.MapTuple(
        lambda row, sig: (row["doc_id"], ["sig", sig.tobytes().hex()])
    )
    offered = (signatures, bucketed[0]) | "Offer signatures" >> GroupOnDisk(
        offer_signature, out, order=lambda v: v
    )
    rows = signed | "Rows" >> beam.MapTuple(
        lambda row, sig: (row["doc_id"], ["row", row, sig.tobytes().hex()])
    )
    kept = (offered, rows) | "Compare" >> GroupOnDisk(
        lambda doc_id, values: mark_or_keep(doc_id, values, config.near_duplicate_threshold),
        out,
        order=lambda v: v[:2] if v[0] == "near" else v[:1],
    )
    return kept, bucketed[1] | "Sum bucket sizes" >> beam.CombineGlobally(sum_tallies)


def build(
    pipeline: beam.Pipeline, config: CorpusConfig, manifests: list[tuple[str, Manifest]], out: storage.Folder
) -> None:
    """Add the corpus stage to ``pipeline`` over completed document outputs (each shard's SHA-256 checked)."""
    shards = sorted((files.join(folder, s.path), s.sha256) for folder, m in manifests for s in m.shards)
    inputs = [
        {"path": absolute_reference(f), "manifest_sha256": files.manifest_sha256(f)} for f, _ in manifests
    ]
    rows = (
        pipeline
        | "Input shards" >> beam.Create(shards)
        | "Spread shards" >> beam.Reshuffle()
        | "Read shards" >> beam.FlatMap(files.read_document_shard)
        | "Progress" >> beam.ParDo(ShowProgress("pipelines corpus: reading", "documents"))
    )
    documents_read = rows | "Count documents" >> CountRecords()
    exact = (
        rows
        | "Key by id" >> beam.Map(lambda r: (r["doc_id"], r))
        | "Exact duplicates" >> GroupOnDisk(keep_one_of_each, out, order=document_sort_key)
    )
    unique = exact | "Unique" >> beam.Filter(lambda o: o.kind == DOCUMENT)
    exact_dropped = exact | "Exact dropped" >> beam.Filter(lambda o: o.kind != DOCUMENT)
    survivors, bucket_sizes = near_duplicates(unique, config, out)

    def split_of(row: dict) -> str:
        return assign_split(
            row["doc_id"], config.validation_fraction, config.test_fraction, config.split_seed
        )

    _ = (exact_dropped, survivors) | "Write" >> WriteStageOutput(
        out,
        "pipelines corpus",
        config,
        params={**config.params(), "input_manifests": inputs},
        extra_tallies=[documents_read, bucket_sizes],
        split_of=split_of,
    )
