"""The record-batch index of an output's Arrow shards: where every record batch lies, and its hash.

``index.json`` sits beside ``manifest.json``; the manifest names it and holds its size and
SHA-256 (``Manifest.index``), and ``COMPLETED`` holds the manifest's hash, so the index is as
trustworthy as the manifest. With it a reader needs no request per shard: it knows every record
batch's byte range and row count, fetches just those bytes and checks them against their own
SHA-256 (a record batch is verified alone, without hashing its whole shard). Layout:

.. code-block:: json

    {
      "index_version": 1,
      "format": "examples", "format_version": 1,
      "schema": "<base64 of the shards' Arrow schema as an IPC message>",
      "shards": [
        {"path": "train/part-00000-of-00002.arrow", "num_bytes": 123456, "sha256": "…",
         "batches": {"offset": [184, …], "length": [5232, …], "num_rows": [1024, …], "sha256": ["…", …]}}
      ]
    }

A batch's bytes ``[offset, offset + length)`` are one encapsulated IPC message (metadata and
body), decoded with ``pyarrow.ipc.read_record_batch(pyarrow.ipc.read_message(bytes), schema)``.
The offsets come from walking the file's messages with pyarrow (:func:`shard_index_entry`), the
same blocks the file's footer lists.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.ipc as ipc

from schemas.manifest import IndexReference, ManifestError

INDEX_VERSION = 1
INDEX_FILE = "index.json"
_FILE_MAGIC_BYTES = 8  # "ARROW1" and two bytes of padding before the first message


@dataclass(frozen=True)
class BatchEntry:
    """One record batch of a shard: its byte range, row count and the SHA-256 of those bytes."""

    offset: int
    length: int
    num_rows: int
    sha256: str


@dataclass(frozen=True)
class ShardIndexEntry:
    """The record batches of one shard (``path`` relative to the output folder, as in the manifest)."""

    path: str
    num_bytes: int
    sha256: str
    batches: tuple[BatchEntry, ...]

    @property
    def num_rows(self) -> int:
        """Rows over the shard's record batches."""
        return sum(b.num_rows for b in self.batches)


@dataclass(frozen=True)
class ShardIndex:
    """The index of every shard of an output: format, Arrow schema and record batches."""

    format: str
    format_version: int
    schema: pa.Schema
    shards: tuple[ShardIndexEntry, ...]
    index_version: int = INDEX_VERSION

    def to_json(self) -> str:
        """Deterministic JSON text (shards in path order)."""
        shards = []
        for entry in sorted(self.shards, key=lambda s: s.path):
            batches = {
                key: [getattr(b, key) for b in entry.batches]
                for key in ("offset", "length", "num_rows", "sha256")
            }
            shards.append(
                {"path": entry.path, "num_bytes": entry.num_bytes, "sha256": entry.sha256, "batches": batches}
            )
        data = {
            "index_version": self.index_version,
            "format": self.format,
            "format_version": self.format_version,
            "schema": base64.b64encode(self.schema.serialize().to_pybytes()).decode("ascii"),
            "shards": shards,
        }
        return json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n"

    @classmethod
    def from_json(cls, text: str | bytes, source: str) -> ShardIndex:
        """Parse and validate index JSON; errors name ``source``."""
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ManifestError(f"{source}: not valid JSON ({err})") from None
        if not isinstance(data, dict) or data.get("index_version") != INDEX_VERSION:
            version = data.get("index_version") if isinstance(data, dict) else None
            raise ManifestError(
                f"{source}: index version {version!r} is not supported (this code reads {INDEX_VERSION}); "
                "rebuild it with `pipelines index OUTPUT --overwrite`"
            )
        try:
            schema = ipc.read_schema(pa.py_buffer(base64.b64decode(data["schema"], validate=True)))
            shards = []
            for s in data["shards"]:
                columns = [s["batches"][key] for key in ("offset", "length", "num_rows", "sha256")]
                batches = tuple(
                    BatchEntry(int(o), int(n), int(r), str(h)) for o, n, r, h in zip(*columns, strict=True)
                )
                shards.append(ShardIndexEntry(str(s["path"]), int(s["num_bytes"]), str(s["sha256"]), batches))
            return cls(str(data["format"]), int(data["format_version"]), schema, tuple(shards))
        except (KeyError, TypeError, ValueError, pa.ArrowInvalid) as err:
            raise ManifestError(f"{source}: malformed index ({type(err).__name__}: {err})") from None

    def check_against(self, shards: Sequence, source: str) -> None:
        """Raise ``ManifestError`` unless the index covers exactly the manifest's ``shards``
        (``ShardEntry``s) with the same sizes, hashes and row counts."""
        mine = {s.path: s for s in self.shards}
        problems = []
        for shard in shards:
            entry = mine.get(shard.path)
            if entry is None:
                problems.append(f"{shard.path} is not in the index")
            elif (entry.num_bytes, entry.sha256, entry.num_rows) != (
                shard.num_bytes,
                shard.sha256,
                shard.num_rows,
            ):
                problems.append(f"{shard.path} differs from the manifest's entry")
        if problems:
            raise ManifestError(
                f"{source}: " + "; ".join(problems) + "; rebuild it with `pipelines index OUTPUT --overwrite`"
            )


def shard_index_entry(
    path: str, data: bytes, batch_rows: Sequence[int] | None = None, sha256: str | None = None
) -> tuple[ShardIndexEntry, pa.Schema]:
    """The index entry of one Arrow IPC file's bytes, and the file's schema.

    Walks the file's encapsulated messages with pyarrow (no footer parsing of our own): each
    record batch's byte range, row count and SHA-256. A writer that knows its batches' row
    counts (``batch_rows``) and the file's hash passes them, so the batches need not be decoded
    (decompressed) to count their rows, nor the file hashed twice; a count of batches other than
    the file's is an error. Raises ``ValueError`` for bytes that are not an Arrow IPC file.
    """
    buffer = pa.py_buffer(data)
    try:
        schema = ipc.open_file(buffer).schema
        reader = pa.BufferReader(buffer)
        reader.seek(_FILE_MAGIC_BYTES)
        batches = []
        while True:
            offset = reader.tell()
            try:
                message = ipc.read_message(reader)
            except EOFError:  # the end-of-stream marker before the footer
                break
            if message.type == "dictionary batch":
                raise ValueError("dictionary-encoded columns are not supported")
            if message.type != "record batch":
                continue
            length = reader.tell() - offset
            if batch_rows is None:
                num_rows = ipc.read_record_batch(message, schema).num_rows
            elif len(batches) < len(batch_rows):
                num_rows = int(batch_rows[len(batches)])
            else:
                raise ValueError(f"{path}: more record batches than the {len(batch_rows)} written")
            digest = hashlib.sha256(memoryview(data)[offset : offset + length]).hexdigest()
            batches.append(BatchEntry(offset, length, num_rows, digest))
    except (pa.ArrowInvalid, OSError) as err:
        raise ValueError(f"{path}: not a readable Arrow IPC file ({err})") from None
    if batch_rows is not None and len(batches) != len(batch_rows):
        raise ValueError(f"{path}: {len(batches)} record batches, {len(batch_rows)} were written")
    entry = ShardIndexEntry(path, len(data), sha256 or hashlib.sha256(data).hexdigest(), tuple(batches))
    return entry, schema


def index_reference(index_json: str) -> IndexReference:
    """What the manifest records of ``index.json``: its path, size and SHA-256."""
    data = index_json.encode("utf-8")
    return IndexReference(INDEX_FILE, len(data), hashlib.sha256(data).hexdigest())
