"""The record-batch index of an output's Arrow shards (``index.json``; docs/shards.md): each record
batch's byte range, rows and SHA-256, so a reader fetches and checks just those bytes; every field
is checked before anything is sized from it."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter

import pyarrow as pa
import pyarrow.ipc as ipc

from schemas.commands import InputError
from schemas.manifest import SHA256_HEX, IndexReference, Manifest, relative_path_problem

INDEX_VERSION = 1
INDEX_FILE = "index.json"
MAX_INDEX_BYTES = 256 << 20  # the largest index read: 2.5 million record batches of 1,024 examples
MAX_RECORD_BATCH_BYTES = 256 << 20  # the largest record batch an index may list (the writer's: a few MB)
MAX_RECORD_BATCH_ROWS = 1 << 20  # the most rows of a record batch (the writer writes 1,024)
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
        """Parse and validate index JSON; :class:`InputError` naming ``source``."""
        rebuild = "regenerate the output with `pipelines examples`"
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as err:
            raise InputError(f"{source}: not valid JSON ({err})") from None
        version = data.get("index_version") if isinstance(data, dict) else None
        if type(version) is not int or version != INDEX_VERSION:
            raise InputError(
                f"{source}: index version {version!r:.40} is not supported (this code reads {INDEX_VERSION}); {rebuild}"
            )
        problem = _index_problem(data)
        if problem is None:
            try:
                schema = ipc.read_schema(pa.py_buffer(base64.b64decode(data["schema"], validate=True)))
            except (ValueError, pa.ArrowInvalid) as err:
                problem = f"schema: {err}"
        if problem is not None:
            raise InputError(f"{source}: malformed index ({problem}); {rebuild}")
        shards = tuple(
            ShardIndexEntry(
                s["path"],
                s["num_bytes"],
                s["sha256"],
                tuple(map(BatchEntry, *(s["batches"][k] for k in _BATCH_KEYS))),
            )
            for s in data["shards"]
        )
        return cls(data["format"], data["format_version"], schema, shards)

    def check_against(self, manifest: Manifest, source: str) -> None:
        """Raise :class:`InputError` unless the index covers exactly the shards of ``manifest``, each
        once, with the same sizes, hashes and row counts, in the manifest's format."""
        problems = []
        if (self.format, self.format_version) != (manifest.format, manifest.format_version):
            problems.append(
                f"it indexes {self.format!r} version {self.format_version}, the manifest holds "
                f"{manifest.format!r} version {manifest.format_version}"
            )
        mine: dict[str, ShardIndexEntry] = {}
        for entry in self.shards:
            if entry.path in mine:
                problems.append(f"{entry.path} is listed twice")
            mine[entry.path] = entry
        listed = {shard.path for shard in manifest.shards}
        problems += [f"{path} is not in the manifest" for path in mine if path not in listed]
        for shard in manifest.shards:
            entry = mine.get(shard.path)
            if entry is None:
                problems.append(f"{shard.path} is not in the index")
            elif _alike(entry) != _alike(shard):
                problems.append(f"{shard.path} differs from the manifest's entry")
        if problems:
            shown = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
            raise InputError(f"{source}: {shown}; regenerate the output with `pipelines examples`")


_TOP_KEYS = {"index_version", "format", "format_version", "schema", "shards"}
_SHARD_KEYS = {"path", "num_bytes", "sha256", "batches"}
_BATCH_KEYS = ("offset", "length", "num_rows", "sha256")
_alike = attrgetter("num_bytes", "sha256", "num_rows")  # what an index entry shares with the manifest's


def _is_count(value: object) -> bool:
    """A JSON integer that is not negative (and not ``true``/``false``)."""
    return type(value) is int and value >= 0


def _is_sha256(value: object) -> bool:
    return isinstance(value, str) and SHA256_HEX.fullmatch(value) is not None


def _index_problem(data: dict) -> str | None:
    """The first thing wrong with an index's JSON (before anything is sized from it), or None."""
    if set(data) != _TOP_KEYS:
        return f"not an object with exactly the keys {', '.join(sorted(_TOP_KEYS))}"
    for ok, problem in (
        (isinstance(data["format"], str), "format is not a string"),
        (_is_count(data["format_version"]), "format_version is not a non-negative integer"),
        (isinstance(data["schema"], str), "schema is not a string"),
        (isinstance(data["shards"], list), "shards is not a list"),
    ):
        if not ok:
            return problem
    return next(filter(None, map(_shard_problem, data["shards"])), None)


def _shard_problem(data: object) -> str | None:
    if not isinstance(data, dict) or set(data) != _SHARD_KEYS:
        return f"a shard is not an object with exactly the keys {', '.join(sorted(_SHARD_KEYS))}"
    path, num_bytes, batches = data["path"], data["num_bytes"], data["batches"]
    problem = relative_path_problem(path)
    if problem is not None:
        return f"shard {path!r:.200}: {problem}"
    if not _is_count(num_bytes):
        return f"{path}: num_bytes is not a non-negative integer"
    if not _is_sha256(data["sha256"]):
        return f"{path}: sha256 is not a hex SHA-256"
    if not isinstance(batches, dict) or set(batches) != set(_BATCH_KEYS):
        return f"{path}: batches is not an object with exactly the keys {', '.join(_BATCH_KEYS)}"
    columns = [batches[key] for key in _BATCH_KEYS]
    if not all(isinstance(c, list) for c in columns) or len({len(c) for c in columns}) != 1:
        return f"{path}: the batches' {', '.join(_BATCH_KEYS)} are not lists of one length"
    for k, batch in enumerate(zip(*columns, strict=True)):
        problem = _batch_problem(*batch, num_bytes)
        if problem is not None:
            return f"{path}: record batch {k}: {problem}"
    return None


def _batch_problem(
    offset: object, length: object, num_rows: object, digest: object, num_bytes: int
) -> str | None:
    """What is wrong with one record batch's entry, or None."""
    if not (_is_count(offset) and _is_count(length) and 0 < length <= MAX_RECORD_BATCH_BYTES):
        return (
            f"offset {offset!r:.40} and length {length!r:.40} are not integers with 0 <= offset and "
            f"0 < length <= {MAX_RECORD_BATCH_BYTES:,}"
        )
    if offset + length > num_bytes:
        return f"bytes {offset}-{offset + length} lie beyond the shard's {num_bytes:,} bytes"
    if not (_is_count(num_rows) and num_rows <= MAX_RECORD_BATCH_ROWS):
        return f"num_rows {num_rows!r:.40} is not an integer from 0 to {MAX_RECORD_BATCH_ROWS:,}"
    return None if _is_sha256(digest) else "sha256 is not a hex SHA-256"


def shard_index_entry(
    path: str, data: bytes, batch_rows: Sequence[int] | None = None, sha256: str | None = None
) -> tuple[ShardIndexEntry, pa.Schema]:
    """The index entry and schema of one Arrow IPC file's bytes (a writer that knows the row counts and hash
    passes them: no decoding, no second hash); ``ValueError`` for bytes that are not an Arrow IPC file."""
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
