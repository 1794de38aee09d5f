"""``pipelines corpus``: merge document outputs, drop exact and near duplicates, split by document id."""

from __future__ import annotations

import apache_beam as beam

from pipelines import files
from pipelines.config import CorpusConfig
from pipelines.corpus.dedup import band_keys, minhash_signature, near_duplicates_in_bucket
from pipelines.corpus.split import assign_split
from pipelines.progress import ShowProgress
from pipelines.stage import (
    DOCUMENT,
    DROPPED,
    CountRecords,
    Outcome,
    WriteStageOutput,
    document_sort_key,
)
from schemas import Manifest, absolute_reference, storage


def keep_one_of_each(element: tuple[str, list[dict]]) -> list[Outcome]:
    """Of documents sharing a ``doc_id``, keep the first in sort order and drop the others."""
    _, rows = element
    rows = sorted(rows, key=document_sort_key)
    return [Outcome(DOCUMENT, "", rows[0])] + [Outcome(DROPPED, "exact_duplicate") for _ in rows[1:]]


def mark_or_keep(element: tuple[str, dict[str, list]]) -> Outcome:
    """Join a document with its near-duplicate mark (if any)."""
    _, grouped = element
    (row,) = grouped["document"]
    return Outcome(DROPPED, "near_duplicate") if grouped["near"] else Outcome(DOCUMENT, "", row)


def near_duplicate_marks(unique: beam.PCollection, config: CorpusConfig) -> beam.PCollection:
    """``(doc_id, mark)`` for every document of ``unique`` with a near duplicate (MinHash, LSH bands)."""
    bands, rows_per_band = config.minhash_bands, config.minhash_rows
    return (
        unique
        | "MinHash"
        >> beam.MapTuple(
            lambda doc_id, row: (
                doc_id,
                minhash_signature(row["sentences"], config.shingle_words, config.num_permutations),
            )
        )
        | "Band keys"
        >> beam.FlatMapTuple(
            lambda doc_id, sig: [(key, (doc_id, sig)) for key in band_keys(sig, bands, rows_per_band)]
        )
        | "Group by band" >> beam.GroupByKey()
        | "Compare in bucket"
        >> beam.FlatMapTuple(
            lambda _, members: near_duplicates_in_bucket(members, config.near_duplicate_threshold)
        )
        | "Key mark" >> beam.Map(lambda found: (found[0], found[1]))
        | "One mark per document" >> beam.CombinePerKey(min)
    )


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
        | "Group by id" >> beam.GroupByKey()
        | "Exact duplicates" >> beam.FlatMap(keep_one_of_each)
    )
    unique = (
        exact
        | "Unique" >> beam.Filter(lambda o: o.kind == DOCUMENT)
        | "Unique rows" >> beam.Map(lambda o: (o.row["doc_id"], o.row))
    )
    exact_dropped = exact | "Exact dropped" >> beam.Filter(lambda o: o.kind != DOCUMENT)
    near = near_duplicate_marks(unique, config)
    survivors = (
        {"document": unique, "near": near}
        | "Join marks" >> beam.CoGroupByKey()
        | "Near duplicates" >> beam.Map(mark_or_keep)
    )

    def split_of(row: dict) -> str:
        return assign_split(
            row["doc_id"], config.validation_fraction, config.test_fraction, config.split_seed
        )

    _ = (
        (exact_dropped, survivors)
        | "All outcomes" >> beam.Flatten()
        | "Write"
        >> WriteStageOutput(
            out=out,
            producer="pipelines corpus",
            params={**config.params(), "input_manifests": inputs},
            num_shards=config.num_shards,
            extra_tallies=[documents_read],
            split_of=split_of,
        )
    )
