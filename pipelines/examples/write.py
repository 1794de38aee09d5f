"""Writing example shards from record batches: examples are split by shard where they are made
(:func:`shard_pieces`, a hash of the pair's identity) as Arrow IPC bytes; :class:`WriteExampleShards`
reads each shard's pieces back, sorts them by (doc_id, dupe_index, pair) and writes the file."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import asdict

import apache_beam as beam
import numpy as np
import pyarrow as pa

from pipelines import files
from pipelines.examples.finish import PAIR_COLUMN, ExampleColumns, examples_table
from pipelines.examples.spill import read_spilled
from pipelines.shuffle import GroupOnDisk
from pipelines.stage import shard_name
from schemas import RecordFormat, ShardEntry, storage
from schemas.formats import batch_row_counts
from schemas.index import shard_index_entry
from wordpiece.masking import hashed_bits

STREAM_SHARD = 21
"""The ``hashed_bits`` stream of shard choice (apart from masking's streams)."""

SORT_KEYS = [("doc_id", "ascending"), ("dupe_index", "ascending"), (PAIR_COLUMN, "ascending")]


def _ipc_stream(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def document_hashes(doc_ids: np.ndarray) -> np.ndarray:
    """Each row's document as 64 bits: the start of its ``doc_id``'s SHA-256, hashed once per document."""
    names = doc_ids.tolist()
    digest = {d: hashlib.sha256(d.encode("utf-8")).digest()[:8] for d in dict.fromkeys(names)}
    return np.frombuffer(b"".join(map(digest.__getitem__, names)), dtype=">u8").astype(np.uint64)


def pair_shards(columns: ExampleColumns, num_shards: int) -> np.ndarray:
    """Each example's shard: a hash of its pair's identity (document, dupe pass, pair index),
    the document's SHA-256 (:func:`document_hashes`) mixed with the pass and then the pair by
    ``hashed_bits``, modulo ``num_shards``; no Python work per example."""
    by_pass = hashed_bits(document_hashes(columns.doc_ids), columns.dupe_index, STREAM_SHARD)
    return (hashed_bits(by_pass, columns.pair_index, STREAM_SHARD) % np.uint64(num_shards)).astype(np.int64)


def shard_pieces(columns: ExampleColumns, fmt: RecordFormat, num_shards: int) -> list[tuple[int, bytes]]:
    """The examples as ``(shard, IPC stream bytes)``, one piece per shard they fall in."""
    if not len(columns):
        return []
    shards = pair_shards(columns, num_shards)
    table = examples_table(columns, fmt)
    order = np.argsort(shards, kind="stable")
    table, shards = table.take(pa.array(order)), shards[order]
    firsts = np.flatnonzero(np.diff(shards, prepend=-1))
    ends = np.append(firsts[1:], len(shards))
    return [
        (int(shards[first]), _ipc_stream(table.slice(first, end - first)))
        for first, end in zip(firsts.tolist(), ends.tolist(), strict=True)
    ]


def shard_table(pieces: Iterable[bytes], fmt: RecordFormat) -> pa.Table:
    """One shard's pieces as one table of ``fmt``, rows sorted by (doc_id, dupe_index, pair)."""
    tables = [pa.ipc.open_stream(piece).read_all() for piece in pieces]
    if not tables:
        return fmt.schema.empty_table()
    table = pa.concat_tables(tables).sort_by(SORT_KEYS).drop_columns([PAIR_COLUMN])
    return table.combine_chunks().replace_schema_metadata(fmt.schema.metadata)


def _write_shard(
    index: int, refs: Iterable, output: str, split: str, num_shards: int, fmt: RecordFormat, folder
) -> dict:
    relative = shard_name(split, index, num_shards)
    path = files.join(output, relative)
    table = shard_table(read_spilled(refs, folder), fmt)
    data = fmt.to_ipc_bytes(table, source=path)
    files.write_bytes(path, data)
    sha256 = files.sha256_hex(data)
    entry = asdict(ShardEntry(relative, fmt.name, split, len(table), len(data), sha256))
    # The record batches' byte ranges and hashes for index.json, from the bytes just written
    # (the table is one chunk: its batches' row counts are known without decoding them).
    entry["index"] = shard_index_entry(relative, data, batch_row_counts(len(table)), sha256)[0]
    return entry


class WriteExampleShards(beam.PTransform):
    """``(shard, reference)`` elements into exactly ``num_shards`` sorted Arrow files (the references
    grouped on disk under ``folder`` on a local runner); one ``ShardEntry`` dict each, with its
    ``ShardIndexEntry`` under ``"index"``."""

    def __init__(
        self, out: storage.Folder, split: str, num_shards: int, fmt: RecordFormat, folder: str | None
    ):
        super().__init__()
        out.journal(*(shard_name(split, i, num_shards) for i in range(num_shards)))  # before the workers
        self._output, self._split, self._num_shards, self._fmt, self._folder = (
            out.url,
            split,
            num_shards,
            fmt,
            folder,
        )

    def expand(self, pieces):
        n, output, split, fmt, folder = self._num_shards, self._output, self._split, self._fmt, self._folder
        return pieces | GroupOnDisk(
            lambda index, refs: [_write_shard(index, refs, output, split, n, fmt, folder)],
            None if folder is None else storage.Folder(folder),
            keys=n,
        )
