"""What every corpus stage shares: an ``Outcome`` per record, and ``WriteStageOutput``: sorted
Arrow shards by a hash of the document id (bytes independent of runner and workers), rejects,
``stats.json``, ``manifest.json`` (with every raw input's SHA-256) and ``COMPLETED``."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import apache_beam as beam

from pipelines import files
from pipelines.shuffle import GroupOnDisk
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
    storage,
)
from schemas.formats import BATCH_ROWS
from schemas.rejects import EXCERPT_CHARS

BATCH_CHARS = 8 << 20
"""Characters of text in a documents file's record batch, at most (one document more): what a writer
or a reader of the file holds."""
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


def sentences_outcome(
    sentences: list[str], min_document_words: int, counts: dict[str, int] | None = None, **fields: Any
) -> Outcome:
    """A cleaned record's sentences as a document with ``fields``, or dropped when empty or too short."""
    if not sentences:
        return Outcome(DROPPED, "empty_after_cleaning")
    sentence_words = [len(s.split()) for s in sentences]
    num_words = sum(sentence_words)
    if num_words < min_document_words:
        return Outcome(DROPPED, "too_short")
    row = {"title": None, "page_id": None, "revision_id": None, **fields}
    row.update(
        doc_id=content_hash(sentences),
        sentences=sentences,
        num_sentences=len(sentences),
        num_words=num_words,
        num_chars=sum(len(s) for s in sentences),
    )
    return Outcome(DOCUMENT, "", row, counts, sentence_words)


class CountRecords(beam.PTransform):
    """How many records a stage read, as a ``records_in`` tally: what ``stats.json`` reconciles against."""

    def expand(self, records):
        return (
            records
            | "Count" >> beam.combiners.Count.Globally()
            | "As tally" >> beam.Map(lambda n: Counter(records_in=n))
        )


def reject_outcome(
    source: str,
    origin: str,
    record_id: str,
    reason: str,
    detail: str,
    *,
    title: str | None = None,
    excerpt: str | None = None,
    kind: str = REJECTED,
) -> Outcome:
    """A record (or, with ``kind=FILE_ERROR``, a whole file) that could not be used, kept aside."""
    excerpt = excerpt[:EXCERPT_CHARS] if excerpt else None
    row = dict(source=source, origin=origin, record_id=record_id, title=title, reason=reason, detail=detail)
    return Outcome(kind, reason, {**row, "excerpt": excerpt})


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
    index: int, rows: Iterator[dict], output: str, split: str, num_shards: int, fmt: RecordFormat
) -> dict[str, Any]:
    """Write a shard from its rows in order, a record batch at a time (BATCH_ROWS rows, fewer where
    they hold BATCH_CHARS characters): the file is hashed as it is written."""
    relative = shard_name(split, index, num_shards)
    path, digest, size = files.join(output, relative), hashlib.sha256(), [0, 0]  # bytes, rows

    def tables() -> Iterator:
        batch, chars = [], 0
        for row in itertools.chain(rows, [None]):
            if batch and (row is None or len(batch) == BATCH_ROWS or chars >= BATCH_CHARS):
                size[1] += len(batch)
                yield fmt.to_table(batch, source=path)
                batch, chars = [], 0
            if row is not None:
                batch.append(row)
                chars += row.get("num_chars") or 0

    def chunks() -> Iterator[bytes]:
        for chunk in fmt.ipc_chunks(tables(), source=path):
            digest.update(chunk)
            size[0] += len(chunk)
            yield chunk

    files.write_bytes(path, chunks())
    return asdict(ShardEntry(relative, fmt.name, split, size[1], size[0], digest.hexdigest()))


class WriteShards(beam.PTransform):
    """Write rows (a PCollection, or a tuple of them) into exactly ``num_shards`` Arrow files, rows
    sorted by ``sort_key`` and grouped on disk on a local runner (``GroupOnDisk``); emit one
    ``ShardEntry`` dict each."""

    def __init__(
        self,
        out: storage.Folder,
        split: str,
        num_shards: int,
        fmt: RecordFormat,
        shard_key: Callable[[dict], str],
        sort_key: Callable[[dict], tuple],
    ):
        super().__init__()
        out.journal(*(shard_name(split, i, num_shards) for i in range(num_shards)))  # before the workers
        self._out, self._split, self._num_shards = out, split, num_shards
        self._fmt, self._shard_key, self._sort_key = fmt, shard_key, sort_key

    def expand(self, rows):
        n, key, out, split, fmt = self._num_shards, self._shard_key, self._out, self._split, self._fmt
        keyed = tuple(
            part | f"Key by shard {i}" >> beam.Map(lambda r: (shard_index(key(r), n), r))
            for i, part in enumerate(rows if isinstance(rows, tuple) else (rows,))
        )
        return keyed | "Group by shard" >> GroupOnDisk(
            lambda index, shard: [_write_shard(index, shard, out.url, split, n, fmt)],
            out,
            self._sort_key,
            n,
        )


def hash_input(path: str) -> dict[str, Any]:
    """A raw input file's absolute path, size and SHA-256 for the manifest (or the error reading it)."""
    digest, size = hashlib.sha256(), 0
    try:
        with files.open_binary(path) as f:
            while chunk := f.read(8 << 20):
                digest.update(chunk)
                size += len(chunk)
    except Exception as err:  # Any filesystem error: recorded, the stage reports the file itself.
        return {"path": absolute_reference(path), "error": f"{type(err).__name__}: {err}"[:300]}
    return {"path": absolute_reference(path), "bytes": size, "sha256": digest.hexdigest()}


def incomplete_reason(stats: dict[str, Any], allow_file_errors: bool = False) -> str | None:
    """Why a corpus stage's output must not be marked ``COMPLETED`` (a file ended early, unless allowed;
    no documents), or None; it then gets ``stats.json`` alone and the command exits 1."""
    if stats["file_errors"] and not allow_file_errors:
        failed = stats["files_with_errors"]
        more = f" (and {len(failed) - 1:,} more file(s): see stats.json)" if len(failed) > 1 else ""
        keep = "; --allow-file-errors keeps what was read before each error"
        return f"{failed[0]['file']}: {failed[0]['detail']}{more}{keep if stats['records_in'] else ''}"
    if not stats["documents_out"]:
        return f"no documents written ({stats['records_in']:,} records read; see stats.json)"
    return None


def write_stats(output: str, stats: dict[str, Any]) -> None:
    """Write ``stats.json`` alone: what a run that may not be marked ``COMPLETED`` leaves."""
    files.write_bytes(files.join(output, STATS_FILE), (json.dumps(stats, indent=2) + "\n").encode("utf-8"))


def write_completion(output: str, stats: dict[str, Any], manifest: Manifest) -> None:
    """Write ``stats.json``, ``manifest.json`` and, last, the ``COMPLETED`` marker of an output."""
    manifest_json = manifest.to_json()
    write_stats(output, stats)
    files.write_bytes(files.join(output, MANIFEST_FILE), manifest_json.encode("utf-8"))
    files.write_bytes(files.join(output, COMPLETED_FILE), completed_marker(manifest_json).encode("utf-8"))


def _finish(
    _,
    output: str,
    producer: str,
    params: dict[str, Any],
    entries: list[dict],
    tally: Counter,
    input_files: list[dict],
    file_errors: list[dict],
) -> dict[str, Any]:
    stats = build_stats(tally)
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


def _route(outcome: Outcome, split_of: Callable[[dict], str] | None) -> Iterator:
    """An outcome's tally, and its row to its split (``all`` without ``split_of``) or the rejects,
    and a file error's line for ``stats.json``, as tagged outputs."""
    split = (split_of(outcome.row) if split_of else "all") if outcome.kind == DOCUMENT else None
    yield beam.pvalue.TaggedOutput("tally", outcome_tally(outcome, split if split_of else None))
    if outcome.kind != DROPPED:
        yield beam.pvalue.TaggedOutput(split or "rejects", outcome.row)
    if outcome.kind == FILE_ERROR:
        row = outcome.row
        yield beam.pvalue.TaggedOutput(
            "file_errors", {"file": row["origin"], "reason": outcome.reason, "detail": row["detail"]}
        )


class WriteStageOutput(beam.PTransform):
    """Write a stage's outcomes: document shards per split (one ``all`` without ``split_of``), rejects,
    stats, manifest (with ``input_files`` hashed) and marker; ``extra_tallies`` add counts."""

    def __init__(
        self,
        out: storage.Folder,
        producer: str,
        config: Any,
        *,
        params: dict[str, Any] | None = None,
        extra_tallies=(),
        split_of: Callable[[dict], str] | None = None,
        input_files: list[str] = (),
    ):
        """``config``: the stage's config (its ``num_shards``, and its ``params()`` unless ``params``)."""
        super().__init__()
        out.journal(STATS_FILE, MANIFEST_FILE, COMPLETED_FILE)  # before the workers
        self._out, self._producer, self._num_shards = out, producer, config.num_shards
        self._params = config.params() if params is None else params
        self._extra_tallies, self._split_of, self._input_files = (
            tuple(extra_tallies),
            split_of,
            sorted(input_files),
        )

    def expand(self, outcomes):
        # Each part is routed and written on its own: a Flatten of several stages is held in memory
        # whole by a local runner; only the shards' runs (GroupOnDisk), tallies and entries meet.
        parts = outcomes if isinstance(outcomes, tuple) else (outcomes,)
        routed = [
            p | f"Route {i}" >> beam.FlatMap(_route, self._split_of).with_outputs()
            for i, p in enumerate(parts)
        ]
        entries = [
            tuple(r[split] for r in routed)
            | f"Write {split}"
            >> WriteShards(
                self._out, split, self._num_shards, DOCUMENTS, lambda r: r["doc_id"], document_sort_key
            )
            for split in (files.SPLITS if self._split_of else ("all",))
        ]
        write = WriteShards(
            self._out,
            "rejects",
            max(1, self._num_shards // 16),
            REJECTS,
            lambda r: f"{r['origin']}\t{r['record_id']}",
            reject_sort_key,
        )
        entries.append(tuple(r.rejects for r in routed) | "Write rejects" >> write)
        tallies = [
            r.tally | f"Sum tallies {i}" >> beam.CombineGlobally(sum_tallies) for i, r in enumerate(routed)
        ]
        total = (
            (*tallies, *self._extra_tallies)
            | "All tallies" >> beam.Flatten()
            | "Sum all tallies" >> beam.CombineGlobally(sum_tallies)
        )
        hashes = (
            parts[0].pipeline
            | "Input files" >> beam.Create(self._input_files)
            | "Spread files" >> beam.Reshuffle()
            | "Hash files" >> beam.Map(hash_input)
        )
        file_errors = tuple(r.file_errors for r in routed)
        return (
            parts[0].pipeline
            | "Finish" >> beam.Create([None])
            | "Write manifest"
            >> beam.Map(
                _finish,
                self._out.url,
                self._producer,
                self._params,
                beam.pvalue.AsList(entries | "All shards" >> beam.Flatten()),
                beam.pvalue.AsSingleton(total),
                beam.pvalue.AsList(hashes),
                beam.pvalue.AsList(file_errors | "All file errors" >> beam.Flatten()),
            )
        )
