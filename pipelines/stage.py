"""What every corpus stage shares: outcomes, deterministic shard writing, and the finish.

A stage maps each record it reads to one ``Outcome``. ``WriteStageOutput`` then writes the
documents as sorted Arrow shards (shard chosen by a hash of the document id, rows sorted, so
the bytes do not depend on runner, workers or bundles), the rejects beside them, and last
``stats.json``, ``manifest.json`` and the ``COMPLETED`` marker.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from pipelines import io
from pipelines.stats import build_stats, document_tally, sum_tallies
from pipelines.text import content_hash
from schemas import (
    COMPLETED_FILE,
    DOCUMENTS,
    MANIFEST_FILE,
    REJECTS,
    STATS_FILE,
    Manifest,
    RecordFormat,
    ShardEntry,
    absolute_reference,
    completed_marker,
)
from schemas.outputs import journal
from schemas.rejects import EXCERPT_CHARS

DOCUMENT = "document"
DROPPED = "dropped"
REJECTED = "rejected"
FILE_ERROR = "file_error"


@dataclass(frozen=True)
class Outcome:
    """What became of one input record: a document row, or a drop/reject reason (with a row)."""

    kind: str
    reason: str = ""
    row: dict[str, Any] | None = None
    counts: dict[str, int] | None = None
    """Extra counts for ``stats.json`` (for example templates rendered and dropped)."""
    sentence_words: list[int] | None = None
    """A document's words per sentence, when its producer counted them (the tally reuses them)."""


def document_outcome(
    row: dict[str, Any], counts: dict[str, int] | None = None, sentence_words: list[int] | None = None
) -> Outcome:
    """A record that became a document, with optional extra counts for ``stats.json``."""
    return Outcome(DOCUMENT, "", row, counts, sentence_words)


def sentences_outcome(
    sentences: list[str], min_document_words: int, counts: dict[str, int] | None = None, **fields: Any
) -> Outcome:
    """A cleaned record's sentences as a document, or dropped when empty or too short.

    ``fields`` are the row's metadata (``source``, ``origin``, ``title``, ``page_id``, ...);
    the id and the counts are derived from the sentences.
    """
    if not sentences:
        return dropped_outcome("empty_after_cleaning")
    sentence_words = [len(s.split()) for s in sentences]
    num_words = sum(sentence_words)
    if num_words < min_document_words:
        return dropped_outcome("too_short")
    row = {"title": None, "page_id": None, "revision_id": None, **fields}
    row.update(
        doc_id=content_hash(sentences),
        sentences=sentences,
        num_sentences=len(sentences),
        num_words=num_words,
        num_chars=sum(len(s) for s in sentences),
    )
    return document_outcome(row, counts, sentence_words)


class CountRecords(beam.PTransform):
    """How many records a stage read, as a ``records_in`` tally: what ``stats.json`` reconciles against."""

    def expand(self, records):
        return (
            records
            | "Count" >> beam.combiners.Count.Globally()
            | "As tally" >> beam.Map(lambda n: Counter(records_in=n))
        )


def dropped_outcome(reason: str) -> Outcome:
    """A record dropped by a filter; counted under ``stats.json``'s ``dropped``."""
    return Outcome(DROPPED, reason)


def reject_outcome(
    *,
    source: str,
    origin: str,
    record_id: str,
    reason: str,
    detail: str,
    title: str | None = None,
    excerpt: str | None = None,
    kind: str = REJECTED,
) -> Outcome:
    """A record (or, with ``kind=FILE_ERROR``, a whole file) that could not be used, kept aside."""
    row = {
        "source": source,
        "origin": origin,
        "record_id": record_id,
        "title": title,
        "reason": reason,
        "detail": detail,
        "excerpt": excerpt[:EXCERPT_CHARS] if excerpt else None,
    }
    return Outcome(kind, reason, row)


def outcome_tally(outcome: Outcome, split: str | None = None) -> Counter:
    """The tally an outcome contributes to ``stats.json``."""
    if outcome.kind == DOCUMENT:
        tally = document_tally(outcome.row["sentences"], split, outcome.sentence_words)
        tally.update(outcome.counts or {})
        return tally
    key = "file_errors" if outcome.kind == FILE_ERROR else outcome.kind
    tally = Counter({f"{key}/{outcome.reason}": 1})
    tally.update(outcome.counts or {})
    return tally


class CountOutcomes(beam.DoFn):
    """Pass outcomes through, counting each in a Beam counter named after its reason."""

    def __init__(self, namespace: str):
        self._namespace = namespace

    def process(self, outcome: Outcome):
        name = "documents_out" if outcome.kind == DOCUMENT else f"{outcome.kind}_{outcome.reason}"
        Metrics.counter(self._namespace, name).inc()
        yield outcome


def shard_index(key: str, num_shards: int) -> int:
    """Which shard a key goes to: a stable hash, independent of Python's hash seed."""
    return int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:16], 16) % num_shards


def shard_name(split: str, index: int, num_shards: int) -> str:
    """Relative path of one shard file."""
    return f"{split}/part-{index:05d}-of-{num_shards:05d}.arrow"


def document_sort_key(row: dict[str, Any]) -> tuple:
    """A total order on document rows (ties on doc_id are exact duplicates from different places)."""
    return (
        row["doc_id"],
        row["source"],
        row["origin"],
        row.get("page_id") or -1,
        row.get("title") or "",
        row.get("revision_id") or -1,
    )


def reject_sort_key(row: dict[str, Any]) -> tuple:
    """A total order on reject rows."""
    return (row["origin"], row["record_id"], row["reason"], row["detail"], row.get("title") or "")


def _write_shard(
    element: tuple[int, list],
    output: str,
    split: str,
    num_shards: int,
    fmt: RecordFormat,
    sort_key: Callable[[dict], tuple],
) -> dict[str, Any]:
    index, rows = element
    rows = sorted((r for r in rows if r is not None), key=sort_key)
    relative = shard_name(split, index, num_shards)
    path = io.join(output, relative)
    data = fmt.to_ipc_bytes(fmt.to_table(rows, source=path), source=path)
    io.write_bytes(path, data)
    return asdict(ShardEntry(relative, fmt.name, split, len(rows), len(data), io.sha256_hex(data)))


class WriteShards(beam.PTransform):
    """Write rows into exactly ``num_shards`` sorted Arrow files; emit one ``ShardEntry`` dict each."""

    def __init__(
        self,
        output: str,
        split: str,
        num_shards: int,
        fmt: RecordFormat,
        shard_key: Callable[[dict], str],
        sort_key: Callable[[dict], tuple],
    ):
        super().__init__()
        self._output, self._split, self._num_shards = output, split, num_shards
        self._fmt, self._shard_key, self._sort_key = fmt, shard_key, sort_key

    def expand(self, rows):
        n, key = self._num_shards, self._shard_key
        journal(*(io.join(self._output, shard_name(self._split, i, n)) for i in range(n)))  # before workers
        keyed = rows | "Key by shard" >> beam.Map(lambda r: (shard_index(key(r), n), r))
        # One placeholder per shard, so that every shard file exists even when empty.
        placeholders = rows.pipeline | "Every shard" >> beam.Create([(i, None) for i in range(n)])
        return (
            (keyed, placeholders)
            | "Merge" >> beam.Flatten()
            | "Group by shard" >> beam.GroupByKey()
            | "Write" >> beam.Map(_write_shard, self._output, self._split, n, self._fmt, self._sort_key)
        )


_HASH_CHUNK = 8 << 20


def hash_input(path: str) -> dict[str, Any]:
    """What a manifest records of one raw input file: absolute path, size and SHA-256.

    Read in chunks (a Wikipedia dump is tens of GB); a file that cannot be read is recorded
    with the error instead, since the stage itself counts it as a file error or reject.
    """
    digest, size = hashlib.sha256(), 0
    try:
        with io.open_binary(path) as f:
            while chunk := f.read(_HASH_CHUNK):
                digest.update(chunk)
                size += len(chunk)
    except Exception as err:  # Any filesystem error: recorded, the stage reports the file itself.
        return {"path": absolute_reference(path), "error": f"{type(err).__name__}: {err}"[:300]}
    return {"path": absolute_reference(path), "bytes": size, "sha256": digest.hexdigest()}


class HashInputs(beam.PTransform):
    """One ``hash_input`` record per raw input file, hashed in parallel beside the stage's work."""

    def __init__(self, files: list[str]):
        super().__init__()
        self._files = sorted(files)

    def expand(self, pbegin):
        return (
            pbegin
            | "Input files" >> beam.Create(self._files)
            | "Spread files" >> beam.Reshuffle()
            | "Hash files" >> beam.Map(hash_input)
        )


def incomplete_reason(stats: dict[str, Any], allow_file_errors: bool = False) -> str | None:
    """Why a corpus stage's output must not be marked ``COMPLETED``, or None when it may be.

    The one rule for empty and failed runs: an output with an input file that ended early
    (a truncated dump, an unreadable book) or with no documents at all gets ``stats.json``
    (to explain what happened) but no manifest and no ``COMPLETED``, and the command exits 1.
    ``allow_file_errors`` (``--allow-file-errors``) accepts the pages read before a file ended.
    """
    if stats["file_errors"] and not allow_file_errors:
        files = stats.get("files_with_errors") or []
        if not files:
            reasons = ", ".join(f"{reason} ({count})" for reason, count in stats["file_errors"].items())
            return f"input file(s) ended early: {reasons}"
        more = f" (and {len(files) - 1:,} more file(s): see stats.json)" if len(files) > 1 else ""
        return (
            f"{files[0]['file']}: {files[0]['detail']}{more}; --allow-file-errors keeps what was read before "
            "each error"
        )
    if not stats["documents_out"]:
        return f"no documents written ({stats['records_in']:,} records read; see stats.json)"
    return None


def write_stats(output: str, stats: dict[str, Any]) -> None:
    """Write ``stats.json`` alone: what a run that may not be marked ``COMPLETED`` leaves."""
    io.write_bytes(io.join(output, STATS_FILE), (json.dumps(stats, indent=2) + "\n").encode("utf-8"))


def write_completion(output: str, stats: dict[str, Any], manifest: Manifest) -> None:
    """Write ``stats.json``, ``manifest.json`` and, last, the ``COMPLETED`` marker of an output."""
    manifest_json = manifest.to_json()
    io.write_bytes(io.join(output, STATS_FILE), (json.dumps(stats, indent=2) + "\n").encode("utf-8"))
    io.write_bytes(io.join(output, MANIFEST_FILE), manifest_json.encode("utf-8"))
    io.write_bytes(io.join(output, COMPLETED_FILE), completed_marker(manifest_json).encode("utf-8"))


def _finish(
    _,
    output: str,
    producer: str,
    params: dict[str, Any],
    entries: list[dict],
    tally: Counter,
    counted_in: str,
    input_files: list[dict],
    file_errors: list[dict],
) -> dict[str, Any]:
    stats = build_stats(tally, counted_in)
    if file_errors:  # the files and what happened to each, for the one-line error (absent when none)
        stats["files_with_errors"] = sorted(file_errors, key=lambda f: (f["file"], f["detail"]))
    if input_files:
        params = {**params, "input_files": sorted(input_files, key=lambda f: f["path"])}
    data = [ShardEntry(**e) for e in entries if e["format"] == DOCUMENTS.name]
    rejects = [ShardEntry(**e) for e in entries if e["format"] == REJECTS.name]
    if incomplete_reason(stats, bool(params.get("allow_file_errors"))) is not None:
        write_stats(output, stats)
        return stats
    manifest = Manifest(DOCUMENTS.name, DOCUMENTS.version, producer, params, tuple(data), tuple(rejects))
    write_completion(output, stats, manifest)
    return stats


class WriteStageOutput(beam.PTransform):
    """Write a stage's outcomes: document shards per split, rejects, stats, manifest, marker.

    ``split_of(row)`` names a document's split (a corpus output); without it every document
    goes to the single split ``all``. ``extra_tallies`` add counts measured elsewhere in the
    graph (the records read, for reconciliation). ``input_files`` are the raw files the stage
    read: the manifest records each one's absolute path, size and SHA-256 (``input_files``).
    """

    def __init__(
        self,
        *,
        output: str,
        producer: str,
        params: dict[str, Any],
        num_shards: int,
        namespace: str,
        extra_tallies=(),
        split_of: Callable[[dict], str] | None = None,
        counted_in: str = "records_in",
        input_files: list[str] = (),
    ):
        super().__init__()
        self._input_files = list(input_files)
        self._output, self._producer, self._params = output, producer, params
        self._num_shards, self._namespace = num_shards, namespace
        self._extra_tallies, self._split_of, self._counted_in = tuple(extra_tallies), split_of, counted_in

    def expand(self, outcomes):
        journal(*(io.join(self._output, name) for name in (STATS_FILE, MANIFEST_FILE, COMPLETED_FILE)))
        outcomes = outcomes | "Count" >> beam.ParDo(CountOutcomes(self._namespace))
        split_of = self._split_of
        documents = outcomes | "Documents" >> beam.Filter(lambda o: o.kind == DOCUMENT)
        entries = []
        splits = io.SPLITS if split_of else ("all",)
        for split in splits:
            rows = documents | f"Rows {split}" >> beam.Map(lambda o: o.row)
            if split_of:
                rows = rows | f"Only {split}" >> beam.Filter(lambda r, s=split: split_of(r) == s)
            entries.append(
                rows
                | f"Write {split}"
                >> WriteShards(
                    self._output, split, self._num_shards, DOCUMENTS, lambda r: r["doc_id"], document_sort_key
                )
            )
        reject_rows = (
            outcomes
            | "Rejects" >> beam.Filter(lambda o: o.kind in (REJECTED, FILE_ERROR))
            | "Reject rows" >> beam.Map(lambda o: o.row)
        )
        num_reject_shards = max(1, self._num_shards // 16)
        entries.append(
            reject_rows
            | "Write rejects"
            >> WriteShards(
                self._output,
                "rejects",
                num_reject_shards,
                REJECTS,
                lambda r: f"{r['origin']}\t{r['record_id']}",
                reject_sort_key,
            )
        )
        tallies = outcomes | "Tally" >> beam.Map(
            lambda o: outcome_tally(o, split_of(o.row) if split_of and o.kind == DOCUMENT else None)
        )
        total = (
            (tallies, *self._extra_tallies)
            | "All tallies" >> beam.Flatten()
            | "Sum tallies" >> beam.CombineGlobally(sum_tallies)
        )
        all_entries = entries | "All shards" >> beam.Flatten()
        hashes = outcomes.pipeline | "Hash inputs" >> HashInputs(self._input_files)
        file_errors = (
            outcomes
            | "File errors" >> beam.Filter(lambda o: o.kind == FILE_ERROR)
            | "File error rows"
            >> beam.Map(lambda o: {"file": o.row["origin"], "reason": o.reason, "detail": o.row["detail"]})
        )
        return (
            outcomes.pipeline
            | "Finish" >> beam.Create([None])
            | "Write manifest"
            >> beam.Map(
                _finish,
                self._output,
                self._producer,
                self._params,
                beam.pvalue.AsList(all_entries),
                beam.pvalue.AsSingleton(total),
                self._counted_in,
                beam.pvalue.AsList(hashes),
                beam.pvalue.AsList(file_errors),
            )
        )
