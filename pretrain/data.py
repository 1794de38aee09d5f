"""Stream pre-training batches from an ``examples`` output folder (local path or fsspec URL).

``ExampleShards`` is an ``IterableDataset`` that yields whole batches, so that every rank gets the
same number of them; use it with ``DataLoader(ds, batch_size=None, num_workers=k)``.

Order. A *unit* is one record batch of one shard. Each epoch permutes the units with a generator
seeded by ``seed + epoch`` and the rows inside each unit with one seeded by ``(seed, epoch, shard,
batch)``; the global example sequence is the concatenation. Global batch ``k`` is the ``k``-th
``batch_size`` slice of that sequence and goes to rank ``k % world_size``; of a rank's batches,
DataLoader worker ``w`` of ``W`` takes every ``W``-th one, so the batches a rank sees, and their order
(the DataLoader interleaves workers round-robin), do not depend on the number of workers.

Equal batches per rank. Every rank gets ``batches_per_epoch`` batches. With ``drop_last=True`` the
examples after the last complete round of ``world_size`` full batches are not seen that epoch
(``dropped_examples``; which ones changes with the epoch's order). With ``drop_last=False`` the
sequence is extended by wrapping around to its own start until every rank has the same number of
full batches (``padded_examples`` repeated examples).

Integrity. The folder must hold a ``COMPLETED`` marker matching ``manifest.json``; every shard's size
is checked and its record-batch row counts are read from the IPC footers at construction (a few
small reads per shard); a shard's SHA-256 is checked, once per process, before its first unit is
used. Units are then fetched with ranged reads of just their bytes.

Resume. ``state_dict()`` is ``{"epoch", "batches_done"}``; ``load_state_dict`` before creating the
iterator makes it skip exactly those batches of this rank without reading their units. The counter
in ``state_dict`` only sees batches yielded in this process: with DataLoader workers the trainer
counts the batches it consumed and saves ``{"epoch": epoch, "batches_done": count}`` itself. Call
``set_epoch`` before each epoch; do not use ``persistent_workers=True`` (workers would keep the old
epoch). Dynamic re-masking is not done: batches carry the masks written by ``pipelines examples``.

Known cost. Batches are dealt round-robin, so every rank (and every worker) reads most units to
use a slice of each: I/O grows with ``world_size × num_workers``. Dealing whole units to ranks and
workers would read each unit once; that change (and the trainer that uses this reader) comes with
the pretrain issue.
"""

from __future__ import annotations

import bisect
import hashlib
import queue
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import torch

from schemas import MANIFEST_FILE, ManifestError, SchemaError, verify_completed
from schemas.examples import examples_format

Batch = dict[str, torch.Tensor]
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
    ) -> None:
        if batch_size < 1 or world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(
                f"need batch_size >= 1 and 0 <= rank < world_size, got {batch_size}, {rank}, {world_size}"
            )
        self.url, self.batch_size, self.seed = url.rstrip("/"), batch_size, seed
        self.rank, self.world_size, self.shuffle, self.drop_last = rank, world_size, shuffle, drop_last
        self.fs, root = fsspec.core.url_to_fs(self.url)
        self._root = root.rstrip("/")
        manifest_text = self.fs.cat_file(f"{self._root}/{MANIFEST_FILE}").decode("utf-8")
        marker_path = f"{self._root}/COMPLETED"
        marker = self.fs.cat_file(marker_path).decode("utf-8") if self.fs.exists(marker_path) else None
        manifest = verify_completed(manifest_text, marker, self.url, "examples")
        self.shards = manifest.shards_for(split) if split is not None else list(manifest.shards)
        if not self.shards:
            raise ManifestError(f"{self.url}: no examples shards{f' in split {split!r}' if split else ''}")
        self.units: list[_Unit] = []
        self.schema: pa.Schema | None = None
        for index in range(len(self.shards)):
            self._read_footer(index)
        self.num_examples = sum(u.num_rows for u in self.units)
        full, partial = divmod(self.num_examples, batch_size)
        if drop_last:
            self.batches_per_epoch = full // world_size
        else:
            self.batches_per_epoch = -(-(full + (partial > 0)) // world_size)
        used = self.batches_per_epoch * world_size * batch_size
        self.dropped_examples = max(0, self.num_examples - used)
        self.padded_examples = max(0, used - self.num_examples)
        self.epoch, self.batches_done, self._start = 0, 0, 0
        self._verified: set[int] = set()

    def _path(self, index: int) -> str:
        return f"{self._root}/{self.shards[index].path}"

    def _read_footer(self, index: int) -> None:
        """Check a shard's size and schema and append its units (from the IPC footer only)."""
        entry, path = self.shards[index], self._path(index)
        try:
            size = self.fs.size(path)
        except FileNotFoundError:
            raise ShardError(f"{path}: shard listed in the manifest is missing") from None
        if size != entry.num_bytes:
            raise ShardError(
                f"{path}: {size} bytes, the manifest says {entry.num_bytes}; truncated or modified"
            )
        try:
            tail = self.fs.cat_file(path, start=size - 10, end=size)
            if size < 18 or tail[4:] != _MAGIC or self.fs.cat_file(path, start=0, end=6) != _MAGIC:
                raise ValueError("no Arrow file magic (truncated?)")
            footer_len = struct.unpack_from("<i", tail, 0)[0]
            footer = self.fs.cat_file(path, start=size - 10 - footer_len, end=size - 10)
            blocks = _footer_blocks(footer)
            with self.fs.open(path, "rb") as handle:
                schema = ipc.open_file(handle).schema
            metas = self.fs.cat_ranges(
                [path] * len(blocks), [b[0] for b in blocks], [b[0] + b[1] for b in blocks]
            )
            rows = [_message_rows(meta) for meta in metas]
        except (ValueError, OSError, struct.error, IndexError, pa.ArrowInvalid) as err:
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

    def state_dict(self) -> dict[str, int]:
        """``{"epoch", "batches_done"}`` as counted in this process (see the module docstring)."""
        return {"epoch": self.epoch, "batches_done": self.batches_done}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume: the next iterator skips this rank's first ``batches_done`` batches of ``epoch``."""
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
        """Rank-local batch indexes for this process, given the resume point ``start``."""
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        return [j for j in range(start, self.batches_per_epoch) if (j - start) % workers == worker]

    # -- reading -----------------------------------------------------------------------------

    def _verify_shard(self, index: int) -> None:
        path, digest = self._path(index), hashlib.sha256()
        with self.fs.open(path, "rb") as handle:
            while chunk := handle.read(1 << 23):
                digest.update(chunk)
        if digest.hexdigest() != self.shards[index].sha256:
            raise ShardError(
                f"{path}: SHA-256 {digest.hexdigest()} differs from the manifest's; the shard was modified"
            )
        self._verified.add(index)

    def _read_unit(self, unit: _Unit) -> pa.RecordBatch:
        """Verify the unit's shard (once per process) and read and decode just the unit's bytes."""
        if unit.shard not in self._verified:
            self._verify_shard(unit.shard)
        path = self._path(unit.shard)
        try:
            data = self.fs.cat_file(path, start=unit.offset, end=unit.offset + unit.length)
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

    def __iter__(self) -> Iterator[Batch]:
        order, start = self._epoch_order(), self._start
        self.batches_done = start
        units = [self.units[i] for i in order]
        starts = np.cumsum([0] + [u.num_rows for u in units]).tolist()
        plan: list[list[tuple[int, int, int]]] = []  # per batch: (unit visit, row_lo, row_hi)
        visits: list[int] = []  # positions in `units`, in reading order
        for j in self._my_batches(start):
            first = (j * self.world_size + self.rank) * self.batch_size
            segments, pos, end = [], first, first + self.batch_size
            while pos < end:
                wrapped = pos % self.num_examples
                u = bisect.bisect_right(starts, wrapped) - 1
                take = min(end - pos, starts[u + 1] - wrapped)
                if not visits or visits[-1] != u:
                    visits.append(u)
                segments.append((len(visits) - 1, wrapped - starts[u], wrapped - starts[u] + take))
                pos += take
            plan.append(segments)
        loaded: queue.Queue = queue.Queue(maxsize=1)
        stop = threading.Event()
        thread = threading.Thread(
            target=self._prefetch, args=([units[u] for u in visits], loaded, stop), daemon=True
        )
        thread.start()
        try:
            current, table = -1, None
            for segments in plan:
                pieces = []
                for visit, lo, hi in segments:
                    while current < visit:
                        table = loaded.get()
                        if isinstance(table, BaseException):
                            raise table
                        current += 1
                    pieces.append(table.slice(lo, hi - lo))
                self.batches_done += 1
                yield collate(pa.Table.from_batches(pieces))
        finally:
            stop.set()


def collate(table: pa.Table) -> Batch:
    """Pad a table of examples into model tensors (sequence length rounded up to a multiple of 8)."""
    size = len(table)
    lengths = table.column("num_tokens").to_numpy().astype(np.int64)
    width = max(8, -(-int(lengths.max()) // 8) * 8) if size else 8
    cols = np.arange(width)[None, :]
    real = cols < lengths[:, None]
    input_ids = np.zeros((size, width), np.int64)
    input_ids[real] = table.column("input_ids").combine_chunks().flatten().to_numpy()
    type_ids = real & (cols >= table.column("num_tokens_a").to_numpy().astype(np.int64)[:, None])
    positions = table.column("masked_lm_positions").combine_chunks()
    counts = pc.list_value_length(positions).to_numpy().astype(np.int64)
    slots = np.arange(int(counts.max()) if size else 0)[None, :] < counts[:, None]
    mlm_pos = np.zeros(slots.shape, np.int64)
    mlm_ids = np.zeros(slots.shape, np.int64)
    mlm_pos[slots] = positions.flatten().to_numpy()
    mlm_ids[slots] = table.column("masked_lm_ids").combine_chunks().flatten().to_numpy()
    labels = np.full((size, width), -100, np.int64)
    labels[np.nonzero(slots)[0], mlm_pos[slots]] = mlm_ids[slots]
    return {
        "input_ids": torch.from_numpy(input_ids),
        "attention_mask": torch.from_numpy(real.astype(np.int64)),
        "token_type_ids": torch.from_numpy(type_ids.astype(np.int64)),
        "masked_lm_positions": torch.from_numpy(mlm_pos),
        "masked_lm_ids": torch.from_numpy(mlm_ids),
        "masked_lm_weights": torch.from_numpy(slots.astype(np.float32)),
        "labels": torch.from_numpy(labels),
        "next_sentence_labels": torch.from_numpy(
            table.column("next_sentence_labels").to_numpy().astype(np.int64)
        ),
    }
