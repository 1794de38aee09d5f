"""``pipelines index``: add the record-batch index (``schemas.index``) to an older examples output.

Outputs of ``pipelines examples`` written before the index existed have shards and a manifest
but no ``index.json``; the trainer's reader refuses them with a line naming this command. It
reads every shard once, checks it against the manifest's size and SHA-256, walks its record
batches, and writes ``index.json``, then ``manifest.json`` naming it, then ``COMPLETED``. The
shards, ``stats.json`` and everything else are left as they are. It reads only inside the folder:
the manifest's shard paths must be relative without ``..`` (``schemas.manifest``), and a local
shard that is a symbolic link to a file outside the folder is refused.

An interrupted run leaves ``COMPLETED`` matching the manifest *without* the index reference;
running the command again recognises that and finishes (or redoes) the job.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa

from pipelines import io
from schemas import (
    COMPLETED_FILE,
    MANIFEST_FILE,
    Manifest,
    ShardEntry,
    completed_marker,
    verify_completed,
)
from schemas.commands import InputError
from schemas.examples import EXAMPLES_VERSION
from schemas.index import (
    INDEX_FILE,
    MAX_RECORD_BATCH_BYTES,
    MAX_RECORD_BATCH_ROWS,
    ShardIndex,
    ShardIndexEntry,
    index_reference,
    shard_index_entry,
)
from schemas.manifest import bytes_match, path_leaves_folder

_PARALLEL_READS = 8


@dataclass(frozen=True)
class IndexResult:
    """What ``add_index`` did: shards and record batches indexed, bytes read, or nothing."""

    num_shards: int
    num_batches: int
    num_bytes_read: int
    already_indexed: bool = False


def _read_manifest(output: str) -> tuple[Manifest, str | None]:
    """The output's manifest, accepting one whose marker matches it without its index reference
    (an interrupted earlier run); returns the manifest and the marker text."""
    marker_path, manifest_path = io.join(output, COMPLETED_FILE), io.join(output, MANIFEST_FILE)
    try:
        marker = io.read_bytes(marker_path).decode("utf-8") if io.exists(marker_path) else None
        text = io.read_bytes(manifest_path).decode("utf-8") if io.exists(manifest_path) else None
    except OSError as err:
        raise io.InputError(f"{output}: cannot read the manifest ({err})") from None
    if text is None:
        raise io.InputError(f"{output}: no {MANIFEST_FILE}; give the output folder of `pipelines examples`")
    try:
        try:
            manifest = verify_completed(text, marker, output, "examples")
        except InputError:
            manifest = Manifest.from_json(text, manifest_path)
            unindexed = dataclasses.replace(manifest, index=None).to_json()
            if manifest.index is None or marker != completed_marker(unindexed):
                raise
            return dataclasses.replace(manifest, index=None), marker  # interrupted: start again
    except InputError as err:
        raise io.InputError(str(err)) from None
    return manifest, marker


def _index_shard(output: str, shard: ShardEntry) -> tuple[ShardIndexEntry, pa.Schema]:
    path = io.join(output, shard.path)  # relative and without `..`: checked with the manifest
    if path_leaves_folder(output, shard.path):
        raise io.InputError(
            f"{path}: a symbolic link to a file outside {output}; an output's shards are read only "
            "from inside it: copy the file into the folder"
        )
    try:
        data = io.read_bytes(path)
    except OSError as err:
        raise io.InputError(f"{path}: cannot read the shard ({err})") from None
    if not bytes_match(data, shard):
        raise io.InputError(
            f"{path}: differs from its manifest entry (size or SHA-256); the shard was modified or "
            "damaged: regenerate the output with `pipelines examples`"
        )
    try:
        entry, schema = shard_index_entry(shard.path, data)
    except ValueError as err:
        raise io.InputError(str(err)) from None
    if entry.num_rows != shard.num_rows:
        raise io.InputError(f"{path}: {entry.num_rows} rows, the manifest says {shard.num_rows}")
    for k, batch in enumerate(entry.batches):
        if batch.length > MAX_RECORD_BATCH_BYTES or batch.num_rows > MAX_RECORD_BATCH_ROWS:
            raise io.InputError(
                f"{path}: record batch {k} has {batch.num_rows:,} rows in {batch.length:,} bytes, more than "
                f"the reader takes ({MAX_RECORD_BATCH_ROWS:,} rows, {MAX_RECORD_BATCH_BYTES:,} bytes); "
                "regenerate the output with `pipelines examples`"
            )
    return entry, schema


def add_index(output: str, overwrite: bool = False) -> IndexResult:
    """Add ``index.json`` to the completed examples output ``output`` (see the module docstring).

    Does nothing when it already has one, unless ``overwrite``. Raises ``io.InputError`` naming
    the file for an output that is not a completed examples output or a shard that does not
    match its manifest entry.
    """
    output = output.rstrip("/")
    manifest, _ = _read_manifest(output)
    if manifest.index is not None and not overwrite:
        return IndexResult(len(manifest.shards), 0, 0, already_indexed=True)
    if manifest.format_version != EXAMPLES_VERSION:
        raise io.InputError(f"{output}: examples format version {manifest.format_version} is not supported")
    if not manifest.shards:
        raise io.InputError(
            f"{output}/{MANIFEST_FILE}: lists no shards; regenerate the output with `pipelines examples`"
        )
    shards = sorted(manifest.shards, key=lambda s: s.path)
    with ThreadPoolExecutor(_PARALLEL_READS) as pool:
        indexed_shards = list(pool.map(lambda s: _index_shard(output, s), shards))
    entries = [entry for entry, _ in indexed_shards]
    schema = indexed_shards[0][1]
    for entry, other in indexed_shards:
        if not other.equals(schema, check_metadata=True):
            raise io.InputError(f"{io.join(output, entry.path)}: schema differs from the other shards'")
    index = ShardIndex(manifest.format, manifest.format_version, schema, tuple(entries))
    index_json = index.to_json()
    indexed = dataclasses.replace(manifest, index=index_reference(index_json))
    manifest_json = indexed.to_json()
    # index first, then the manifest naming it, then the marker: see the module docstring
    io.write_bytes(io.join(output, INDEX_FILE), index_json.encode("utf-8"))
    io.write_bytes(io.join(output, MANIFEST_FILE), manifest_json.encode("utf-8"))
    io.write_bytes(io.join(output, COMPLETED_FILE), completed_marker(manifest_json).encode("utf-8"))
    return IndexResult(len(entries), sum(len(e.batches) for e in entries), sum(s.num_bytes for s in shards))
