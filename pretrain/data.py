"""Stream pre-training batches from an ``examples`` output folder (local path or fsspec URL).

``ExampleShards`` is an ``IterableDataset`` that yields whole padded batches (see
:func:`pretrain.collate.collate`), so that every rank gets the same number of them; use it with
``DataLoader(ds, batch_size=None, num_workers=k)``.

Order. A *unit* is one record batch of one shard. Each epoch permutes the units with a generator
seeded by ``seed + epoch`` and the rows inside each unit with one seeded by ``(seed, epoch, shard,
batch)``; the epoch's global sequence of ``N`` examples is their concatenation. It is cut into
``world_size × streams`` contiguous *streams* of ``L`` examples each (``L`` a multiple of the batch
size); rank ``r`` owns streams ``r·streams … r·streams + streams − 1``. A rank's batch ``j`` is the
``j // streams``-th batch of its stream ``j % streams``. A DataLoader worker reads only its own
streams (stream ``v`` goes to worker ``(v − start) % workers``), and the DataLoader's round-robin
over workers returns the batches in exactly the order ``j``: the batches a rank sees and their
order are the same for any number of workers that divides ``streams``, and every unit is read by
one rank and one worker (a unit that straddles two streams is read by both). ``streams`` is 8 by
default, fewer when the data is small (:func:`auto_streams`).

Equal batches per rank. With ``drop_last=True``, ``L = ⌊N / (world_size·streams·batch)⌋·batch`` and
the ``dropped_examples`` at the end of the epoch's sequence are not seen that epoch (which ones
changes each epoch). With ``drop_last=False`` the streams are rounded up instead and wrap around to
the start of the sequence (``padded_examples`` repeated examples).

Integrity. The folder must hold a ``COMPLETED`` marker matching ``manifest.json``; given a
vocabulary hash, it must equal the manifest's; every shard's size is checked and its record-batch
row counts are read from the IPC footers at construction (a few small reads per shard); a shard's
SHA-256 is checked, once per process, before its first unit is used. Units are then fetched with
ranged reads of just their bytes, ``prefetch`` units ahead on a background thread. A read that
fails with an I/O error (a bucket briefly unreachable) is retried with back-off, ``retries``
times, and then raises :class:`ShardError`; a retry reads the same bytes, so it never changes the
data.

Resume. ``state_dict()`` is ``{"epoch", "batches_done", …}``; ``load_state_dict`` before creating
the iterator makes it skip exactly those batches of this rank without reading units that hold
only consumed examples. With DataLoader workers the process's own counter does not see the
batches, so the trainer counts what it consumed and saves :meth:`ExampleShards.state_at`. Call
``set_epoch`` before each epoch; do not use ``persistent_workers=True`` (workers would keep the old
epoch).

Dynamic masking. Given a :class:`pretrain.collate.DynamicMasking`, every batch is re-masked with a
generator seeded by ``(seed, epoch, stream, batch in stream)``: a fresh choice each epoch, the same
for any number of workers and after a resume.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import os
import queue
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import torch

from pretrain.collate import Batch, DynamicMasking, collate
from schemas import MANIFEST_FILE, ManifestError, SchemaError, verify_completed
from schemas.examples import examples_format

log = logging.getLogger(__name__)

__all__ = ["Batch", "DynamicMasking", "ExampleShards", "ShardError", "auto_streams", "collate"]
_MAGIC = b"ARROW1"


class ShardError(ValueError):
    """An examples shard is missing, truncated, modified or not readable; the message names it."""


@dataclass(frozen=True)
class _Unit:
    shard: int
    batch: int  # record-batch index inside the shard
    offset: int  # byte range of the record-batch message (metadata + body)
    length: int
    num_rows: int


def _field(buf: bytes, table: int, index: int) -> int | None:
    """Position of field ``index`` of a flatbuffer table, or None when absent."""
    vtable = table - struct.unpack_from("<i", buf, table)[0]
    slot = 4 + 2 * index
    if slot >= struct.unpack_from("<H", buf, vtable)[0]:
        return None
    offset = struct.unpack_from("<H", buf, vtable + slot)[0]
    return table + offset if offset else None


def _deref(buf: bytes, pos: int) -> int:
    return pos + struct.unpack_from("<I", buf, pos)[0]


def _footer_blocks(footer: bytes) -> list[tuple[int, int, int]]:
    """``(offset, metadata_length, body_length)`` of every record batch in an IPC file footer."""
    pos = _field(footer, _deref(footer, 0), 3)  # Footer.recordBatches
    if pos is None:
        return []
    vec = _deref(footer, pos)
    count = struct.unpack_from("<I", footer, vec)[0]
    return [struct.unpack_from("<qi4xq", footer, vec + 4 + 24 * k) for k in range(count)]


def _message_rows(meta: bytes) -> int:
    """The row count in a record-batch message's metadata (``Message.header.length``)."""
    buf = meta[8:] if meta[:4] == b"\xff\xff\xff\xff" else meta[4:]
    root = _deref(buf, 0)
    kind, header = _field(buf, root, 1), _field(buf, root, 2)
    if kind is None or buf[kind] != 3 or header is None:  # MessageHeader.RecordBatch == 3
        raise ValueError("message is not a record batch")
    length = _field(buf, _deref(buf, header), 0)
    return 0 if length is None else struct.unpack_from("<q", buf, length)[0]


def auto_streams(num_examples: int, world_size: int, batch_size: int) -> int:
    """Streams per rank: 8, or the largest of 4, 2, 1 that still gives every stream 16 batches."""
    for streams in (8, 4, 2):
        if num_examples >= world_size * streams * batch_size * 16:
            return streams
    return 1


class ExampleShards(torch.utils.data.IterableDataset):
    """Batches of BERT pre-training examples for one rank; see the module docstring."""

    def __init__(
        self,
        url: str,
        *,
        batch_size: int,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        shuffle: bool = True,
        drop_last: bool = True,
        split: str | None = None,
        streams: int | None = None,
        masking: DynamicMasking | None = None,
        vocab_sha256: str | None = None,
        prefetch: int = 2,
        storage_options: dict | None = None,
        retries: int = 6,
    ) -> None:
        if batch_size < 1 or world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(
                f"need batch_size >= 1 and 0 <= rank < world_size, got {batch_size}, {rank}, {world_size}"
            )
        if (streams is not None and streams < 1) or prefetch < 1:
            raise ValueError(f"streams and prefetch must be at least 1, got {streams} and {prefetch}")
        self.url, self.batch_size, self.seed = url.rstrip("/"), batch_size, seed
        self.rank, self.world_size, self.shuffle, self.drop_last = rank, world_size, shuffle, drop_last
        self.masking, self.prefetch, self.retries = masking, prefetch, retries
        self.storage_options = dict(storage_options or {})
        self._open_filesystem()
        manifest_path = f"{self._root}/{MANIFEST_FILE}"
        if not self.fs.exists(manifest_path):
            raise ManifestError(
                f"{self.url}: no {MANIFEST_FILE}; give the output folder of `pipelines examples`"
            )
        manifest_text = self.fs.cat_file(manifest_path).decode("utf-8")
        marker_path = f"{self._root}/COMPLETED"
        marker = self.fs.cat_file(marker_path).decode("utf-8") if self.fs.exists(marker_path) else None
        self.manifest = verify_completed(manifest_text, marker, self.url, "examples")
        self.params: dict = dict(self.manifest.params)
        recorded = self.params.get("vocab_sha256")
        if vocab_sha256 is not None and recorded != vocab_sha256:
            raise ManifestError(
                f"{self.url}/{MANIFEST_FILE}: the shards were written with the vocabulary of SHA-256 "
                f"{recorded}, not the given one ({vocab_sha256}); use the vocabulary the shards were made with"
            )
        self.shards = self.manifest.shards_for(split) if split is not None else list(self.manifest.shards)
        if not self.shards:
            raise ManifestError(f"{self.url}: no examples shards{f' in split {split!r}' if split else ''}")
        self.units: list[_Unit] = []
        self.schema: pa.Schema | None = None
        for index in range(len(self.shards)):
            self._read_footer(index)
        self.num_examples = n = sum(u.num_rows for u in self.units)
        self.streams = streams or auto_streams(n, world_size, batch_size)
        total_streams = world_size * self.streams
        if drop_last:
            self.stream_rows = n // (total_streams * batch_size) * batch_size
        else:
            self.stream_rows = -(-n // (total_streams * batch_size)) * batch_size
        if self.stream_rows == 0:
            raise ValueError(
                f"{self.url}: {n} examples are too few for {world_size} rank(s) × {self.streams} stream(s) "
                f"of batches of {batch_size}; lower the batch size or the streams per rank"
            )
        self.batches_per_epoch = self.streams * self.stream_rows // batch_size
        used = total_streams * self.stream_rows
        self.dropped_examples = max(0, n - used)
        self.padded_examples = max(0, used - n)
        self.epoch, self.batches_done, self._start = 0, 0, 0
        self._verified: set[int] = set()

    def _open_filesystem(self) -> None:
        """(Re)connect; async filesystems such as gcsfs cannot be used across a fork, so a
        DataLoader worker opens its own."""
        self.fs, root = fsspec.core.url_to_fs(self.url, **self.storage_options)
        self._root = root.rstrip("/")
        self._pid = os.getpid()

    def _path(self, index: int) -> str:
        return f"{self._root}/{self.shards[index].path}"

    def _read_footer(self, index: int) -> None:
        """Check a shard's size and schema and append its units (from the IPC footer only)."""
        entry, path = self.shards[index], self._path(index)
        size = self._retrying(path, lambda: self.fs.size(path))
        if size != entry.num_bytes:
            raise ShardError(
                f"{path}: {size} bytes, the manifest says {entry.num_bytes}; truncated or modified"
            )

        def read() -> tuple[list, pa.Schema, list[bytes]]:
            tail = self.fs.cat_file(path, start=size - 10, end=size)
            if size < 18 or tail[4:] != _MAGIC or self.fs.cat_file(path, start=0, end=6) != _MAGIC:
                raise ValueError("no Arrow file magic (truncated?)")
            footer_len = struct.unpack_from("<i", tail, 0)[0]
            footer = self.fs.cat_file(path, start=size - 10 - footer_len, end=size - 10)
            blocks = _footer_blocks(footer)
            with self.fs.open(path, "rb") as handle:
                schema = ipc.open_file(handle).schema
            starts, ends = [b[0] for b in blocks], [b[0] + b[1] for b in blocks]
            metas = self.fs.cat_ranges([path] * len(blocks), starts, ends, on_error="raise")
            return blocks, schema, metas

        try:
            blocks, schema, metas = self._retrying(path, read)
            rows = [_message_rows(meta) for meta in metas]
        except (ValueError, struct.error, IndexError, pa.ArrowInvalid) as err:
            if isinstance(err, ShardError):
                raise
            raise ShardError(f"{path}: not a readable Arrow IPC file ({err})") from None
        if sum(rows) != entry.num_rows:
            raise ShardError(f"{path}: {sum(rows)} rows, the manifest says {entry.num_rows}")
        self._check_schema(schema, path)
        for k, ((offset, meta_len, body_len), n) in enumerate(zip(blocks, rows, strict=True)):
            if n:
                self.units.append(_Unit(index, k, offset, meta_len + body_len, n))

    def _check_schema(self, schema: pa.Schema, path: str) -> None:
        empty = schema.empty_table()
        try:
            examples_format(
                1 if schema.field("input_ids").type.value_type == pa.uint16() else 1 << 17
            ).validate(empty, path)
        except (KeyError, SchemaError) as err:
            raise ShardError(
                str(err) if isinstance(err, SchemaError) else f"{path}: no input_ids column"
            ) from None
        if self.schema is not None and not schema.equals(self.schema):
            raise ShardError(f"{path}: schema differs from the other shards' ({self._path(0)})")
        self.schema = schema

    # -- state -------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Batches this rank gets per epoch (independent of the resume point)."""
        return self.batches_per_epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next iterator yields, from its first batch."""
        self.epoch, self.batches_done, self._start = epoch, 0, 0

    def state_at(self, batches_done: int, epoch: int | None = None) -> dict[str, int]:
        """The resume state after this rank consumed ``batches_done`` batches of ``epoch``."""
        return {
            "epoch": self.epoch if epoch is None else epoch,
            "batches_done": batches_done,
            "batch_size": self.batch_size,
            "world_size": self.world_size,
            "streams": self.streams,
            "num_examples": self.num_examples,
            "seed": self.seed,
        }

    def state_dict(self) -> dict[str, int]:
        """:meth:`state_at` the batches yielded in this process (see the module docstring)."""
        return self.state_at(self.batches_done)

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume: the next iterator skips this rank's first ``batches_done`` batches of ``epoch``.

        The order depends on the batch size, world size, streams, data and seed; a state saved
        under other values of these cannot continue the same order and is refused.
        """
        for key in ("batch_size", "world_size", "streams", "num_examples", "seed"):
            if key in state and state[key] != getattr(self, key):
                raise ValueError(
                    f"the saved reader state has {key}={state[key]} but this reader has {getattr(self, key)}: "
                    "resume with the settings and shards of the interrupted run"
                )
        if not 0 <= state["batches_done"] <= self.batches_per_epoch:
            raise ValueError(f"batches_done {state['batches_done']} outside 0..{self.batches_per_epoch}")
        self.epoch, self.batches_done = int(state["epoch"]), int(state["batches_done"])
        self._start = self.batches_done

    # -- order -------------------------------------------------------------------------------

    def _epoch_order(self) -> list[int]:
        if not self.shuffle:
            return list(range(len(self.units)))
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return torch.randperm(len(self.units), generator=generator).tolist()

    def _row_order(self, unit: _Unit) -> np.ndarray:
        if not self.shuffle:
            return np.arange(unit.num_rows)
        return np.random.default_rng([self.seed, self.epoch, unit.shard, unit.batch]).permutation(
            unit.num_rows
        )

    def _my_batches(self, start: int) -> list[int]:
        """This process's rank-local batch indexes from the resume point ``start``, in order."""
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        if self.streams % workers:
            raise ValueError(
                f"{workers} DataLoader workers do not divide the {self.streams} streams per rank, so the "
                f"order would depend on them; use a number of workers that divides {self.streams}"
            )
        return [j for j in range(start, self.batches_per_epoch) if (j - start) % workers == worker]

    # -- reading -----------------------------------------------------------------------------

    def _retrying(self, what: str, read):
        """``read()``, retried with exponential back-off (1, 2, 4, … s) on I/O errors other than a
        missing file — a bucket that is briefly unreachable — up to ``retries`` times; then a
        :class:`ShardError` naming ``what``. Every attempt reads the same bytes, so a retry never
        changes the data."""
        for attempt in range(self.retries + 1):
            try:
                return read()
            except FileNotFoundError:
                raise ShardError(f"{what}: missing (deleted after the manifest was checked?)") from None
            except OSError as err:
                if attempt == self.retries:
                    raise ShardError(
                        f"{what}: unreadable after {self.retries + 1} attempts ({err})"
                    ) from None
                delay = min(2.0**attempt, 30.0)
                log.warning("%s: %s; retrying in %.0f s (%d/%d)", what, err, delay, attempt + 1, self.retries)
                time.sleep(delay)
                if self._pid == os.getpid():
                    self.fs.invalidate_cache()

    def _verify_shard(self, index: int) -> None:
        path = self._path(index)

        def digest() -> str:
            hasher = hashlib.sha256()
            with self.fs.open(path, "rb") as handle:
                while chunk := handle.read(1 << 23):
                    hasher.update(chunk)
            return hasher.hexdigest()

        found = self._retrying(path, digest)
        if found != self.shards[index].sha256:
            raise ShardError(f"{path}: SHA-256 {found} differs from the manifest's; the shard was modified")
        self._verified.add(index)

    def _read_unit(self, unit: _Unit) -> pa.RecordBatch:
        """Verify the unit's shard (once per process) and read and decode just the unit's bytes."""
        if unit.shard not in self._verified:
            self._verify_shard(unit.shard)
        path = self._path(unit.shard)
        data = self._retrying(
            f"{path} (record batch {unit.batch})",
            lambda: self.fs.cat_file(path, start=unit.offset, end=unit.offset + unit.length),
        )
        if len(data) != unit.length:
            raise ShardError(
                f"{path}: record batch {unit.batch} is {len(data)} bytes, expected {unit.length}"
            )
        try:
            batch = ipc.read_record_batch(ipc.read_message(pa.py_buffer(data)), self.schema)
        except (OSError, pa.ArrowInvalid) as err:
            raise ShardError(f"{path}: record batch {unit.batch} is unreadable ({err})") from None
        return batch.take(pa.array(self._row_order(unit)))

    def _prefetch(self, units: list[_Unit], out: queue.Queue, stop: threading.Event) -> None:
        for unit in units:
            try:
                item: object = self._read_unit(unit)
            except BaseException as err:  # handed to the consumer, which re-raises it
                item = err
            while not stop.is_set():
                try:
                    out.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if stop.is_set() or isinstance(item, BaseException):
                return

    def _plan(self, units: list[_Unit]) -> tuple[list[tuple[int, int, list]], list[int]]:
        """Per batch of this process ``(stream, batch in stream, [(visit, row_lo, row_hi)])``, and
        the unit positions to read in order (a visit is one stream's read of one unit)."""
        starts = np.cumsum([0] + [u.num_rows for u in units]).tolist()
        plan, visits, current = [], [], {}  # current: stream -> (unit position, visit)
        for j in self._my_batches(self._start):
            stream = self.rank * self.streams + j % self.streams
            index = j // self.streams
            pos = stream * self.stream_rows + index * self.batch_size
            end, segments = pos + self.batch_size, []
            while pos < end:
                wrapped = pos % self.num_examples
                u = bisect.bisect_right(starts, wrapped) - 1
                take = min(end - pos, starts[u + 1] - wrapped)
                if current.get(stream, (None,))[0] != u:
                    current[stream] = (u, len(visits))
                    visits.append(u)
                segments.append((current[stream][1], wrapped - starts[u], wrapped - starts[u] + take))
                pos += take
            plan.append((stream, index, segments))
        return plan, visits

    def __iter__(self) -> Iterator[Batch]:
        if self._pid != os.getpid():
            self._open_filesystem()
        units = [self.units[i] for i in self._epoch_order()]
        self.batches_done = self._start
        plan, visits = self._plan(units)
        loaded: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()
        thread = threading.Thread(
            target=self._prefetch, args=([units[u] for u in visits], loaded, stop), daemon=True
        )
        thread.start()
        try:
            tables: dict[int, pa.RecordBatch] = {}  # visit -> rows, while a batch may still need them
            latest: dict[int, int] = {}  # stream -> its newest visit
            next_visit = 0
            for stream, index, segments in plan:
                pieces = []
                for visit, lo, hi in segments:
                    while next_visit <= visit:
                        table = loaded.get()
                        if isinstance(table, BaseException):
                            raise table
                        tables[next_visit] = table
                        next_visit += 1
                    pieces.append(tables[visit].slice(lo, hi - lo))
                    if latest.get(stream, visit) != visit:
                        tables.pop(latest[stream], None)
                    latest[stream] = visit
                rng = None
                if self.masking is not None:
                    rng = np.random.default_rng([self.seed, self.epoch, stream, index, 1])
                self.batches_done += 1
                yield collate(pa.Table.from_batches(pieces), self.masking, rng)
        finally:
            stop.set()
