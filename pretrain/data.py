"""Stream pre-training batches from an ``examples`` output folder (local path or fsspec URL).

``ExampleShards`` is an ``IterableDataset`` that yields whole padded batches (see
:func:`pretrain.collate.collate`), so that every rank gets the same number of them; use it with
``DataLoader(ds, batch_size=None, num_workers=k)``.

Order. A *unit* is one record batch of one shard. Each epoch permutes the units with a generator
seeded by ``seed + epoch`` and the rows inside each unit with one seeded by ``(seed, epoch, shard,
batch)``; the epoch's global sequence of ``N`` examples is their concatenation. It is cut into
``world_size × streams`` contiguous *segments* of ``L`` examples each (``L`` a multiple of the
batch size); rank ``r`` owns segments ``r·streams … r·streams + streams − 1``, and its *stream*
``v`` reads segment ``r·streams + position(v)``, with ``position`` the digit reversal of
:func:`pretrain.streams.segment_positions` (0, 4, 2, 6, 1, 5, 3, 7 for 8 streams). A rank's batch
``j`` is the ``j // streams``-th batch of its stream ``j % streams``. A DataLoader worker reads
only its own streams (stream ``v`` goes to worker ``(v − start) % workers``), and the
DataLoader's round-robin over workers returns the batches in exactly the order ``j``: the batches
a rank sees and their order are the same for any number of workers that divides ``streams``.
``streams`` is 8 by default, fewer when the data is small (:func:`auto_streams`).

Fetched once. Every unit is fetched by the ranks and workers whose segments it overlaps, once by
each (:meth:`pretrain.streams.EpochPlan.walk`): a unit that two streams of one process need —
it straddles their segments' boundary — is kept from the first stream's need to the last's. With
the digit reversal a worker's streams read adjacent segments when the number of workers is a
product of the smallest prime factors of ``streams`` (1, 2, 4 or 8 of 8), so an epoch fetches at
most ``world_size × workers − 1`` units beyond the dataset (with other worker counts, a unit at
each boundary between two workers' segments). Measured: 4 ranks × 8 streams over 40 units read
1.08x the dataset's bytes in process, 1.16x with 2 workers per rank; the reader before this
fetched a unit once per stream, 1.79x.

Memory. A process holds the decoded units its streams are in (one per stream), each unit that a
later stream of it will still need (one per boundary between its streams: at most one per
stream) and ``prefetch`` units read ahead: at most ``2 × streams / workers + prefetch`` decoded
record batches (about 0.4 MB each at 1,024 rows of 128 tokens, 1.2 MB at 512), plus the unit
table (a few hundred bytes per record batch of the dataset). Nothing is allocated from a count
read from a file before it is checked: the plan of an epoch is computed batch by batch, and a
record batch's rows are checked against the index when it is decoded.

Equal batches per rank. With ``drop_last=True``, ``L = ⌊N / (world_size·streams·batch)⌋·batch`` and
the ``dropped_examples`` at the end of the epoch's sequence are not seen that epoch (which ones
changes each epoch). With ``drop_last=False`` the streams are rounded up instead and wrap around to
the start of the sequence (``padded_examples`` repeated examples).

Integrity. The folder must hold a ``COMPLETED`` marker matching ``manifest.json``; given a
vocabulary hash, it must equal the manifest's. Building the reader reads three small files and
nothing else, whatever the number of shards: ``manifest.json``, ``COMPLETED`` and the record-batch
index ``index.json`` that the manifest names and hashes (:mod:`schemas.index`: every record
batch's byte range, row count and SHA-256, and the shards' Arrow schema). An output written
before the index existed is refused with a line naming ``pipelines index OUTPUT``, which adds
it. The index must agree with the manifest (each shard once, the same sizes, hashes and rows;
every byte range inside its shard; :mod:`schemas.index`), the shard paths stay inside the folder
(relative, no ``..``; locally, no symbolic link leading out of it). A unit's bytes are fetched
with one ranged read and checked against their own SHA-256 before they are decoded (no
whole-shard hashing, no footer reads), ``prefetch`` units ahead on a background thread; a
mismatch raises :class:`ShardError` naming the shard and the record batch. So do values no
writer makes (:func:`schemas.examples.example_batch_problem`: token ids at or above
``vocab_size``, which the trainer sets, masked positions outside the sequence, labels other than
0 and 1, …), checked as each unit is decoded (about 0.45 ms per 1,024 rows of 128 tokens). A
read that fails with an I/O error (a bucket briefly unreachable) is retried with back-off,
``retries`` times, and then raises :class:`ShardError`; a retry reads the same bytes, so it never
changes the data.

Resume. ``state_dict()`` is ``{"epoch", "batches_done", …}``; ``load_state_dict`` before creating
the iterator makes it skip exactly those batches of this rank without reading units that hold
only consumed examples. With DataLoader workers the process's own counter does not see the
batches, so the trainer counts what it consumed and saves :meth:`ExampleShards.state_at`.

Workers. :class:`ShardLoader` wraps the DataLoader: its workers live for the whole run
(``persistent_workers``), and ``set_epoch`` / ``load_state_dict`` reach them through a small
shared-memory tensor read at the start of each iterator, so a worker's start-up (and its
filesystem connection) is paid once per run. A :class:`ShardError` inside a worker reaches the
caller as the same one-line :class:`ShardError` as without workers; a worker that dies or
sends nothing for ``timeout_s`` stops the run with a :class:`ShardError` instead of a hang.

Dynamic masking. Given a :class:`pretrain.collate.DynamicMasking`, every batch is re-masked with a
generator seeded by ``(seed, epoch, stream, batch in stream)``: a fresh choice each epoch, the same
for any number of workers and after a resume.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import queue
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
from pretrain.streams import EpochPlan, segment_positions
from schemas import COMPLETED_FILE, MANIFEST_FILE, verify_completed
from schemas.commands import InputError
from schemas.examples import ExampleLimits, example_batch_problem, examples_format
from schemas.index import INDEX_FILE, MAX_INDEX_BYTES, ShardIndex
from schemas.manifest import bytes_match, path_leaves_folder

log = logging.getLogger(__name__)

__all__ = [
    "Batch",
    "DynamicMasking",
    "ExampleShards",
    "ReaderFailure",
    "ShardError",
    "ShardLoader",
    "auto_streams",
    "collate",
]


ORDER_VERSION = 2
"""The version of the batch order (:meth:`ExampleShards.state_at` records it): 2 since streams read
digit-reversed segments (:mod:`pretrain.streams`)."""


class ShardError(ValueError):
    """An examples shard is missing, truncated, modified or not readable; the message names it."""


@dataclass(frozen=True)
class _Unit:
    shard: int
    batch: int  # record-batch index inside the shard
    offset: int  # byte range of the record-batch message (metadata + body)
    length: int
    num_rows: int
    sha256: str  # of those bytes, from the index


@dataclass(frozen=True)
class ReaderFailure:
    """What a DataLoader worker yields instead of raising a :class:`ShardError`, so that the
    error reaches the user as one line (see :class:`ShardLoader`)."""

    message: str


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
        vocab_size: int | None = None,
        prefetch: int = 2,
        storage_options: dict | None = None,
        retries: int = 6,
        timeout_s: float = 600.0,
    ) -> None:
        if batch_size < 1 or world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(
                f"need batch_size >= 1 and 0 <= rank < world_size, got {batch_size}, {rank}, {world_size}"
            )
        if (streams is not None and streams < 1) or prefetch < 1:
            raise ValueError(f"streams and prefetch must be at least 1, got {streams} and {prefetch}")
        self.url, self.batch_size, self.seed = url.rstrip("/"), batch_size, seed
        self.rank, self.world_size, self.shuffle, self.drop_last = rank, world_size, shuffle, drop_last
        self.masking, self.prefetch, self.retries, self.timeout_s = masking, prefetch, retries, timeout_s
        self.vocab_size = vocab_size  # token ids must be below it (see ExampleLimits); settable later
        self.storage_options = dict(storage_options or {})
        self._open_filesystem()
        manifest_text = self._read_small(MANIFEST_FILE)
        if manifest_text is None:
            raise InputError(
                f"{self.url}: no {MANIFEST_FILE}; give the output folder of `pipelines examples`"
            )
        marker = self._read_small(COMPLETED_FILE)
        self.manifest = verify_completed(
            manifest_text.decode("utf-8"),
            None if marker is None else marker.decode("utf-8"),
            self.url,
            "examples",
        )
        self.params: dict = dict(self.manifest.params)
        self.max_seq_length = _max_seq_length(self.params)
        recorded = self.params.get("vocab_sha256")
        if vocab_sha256 is not None and recorded != vocab_sha256:
            raise InputError(
                f"{self.url}/{MANIFEST_FILE}: the shards were written with the vocabulary of SHA-256 "
                f"{recorded}, not the given one ({vocab_sha256}); use the vocabulary the shards were made with"
            )
        self.shards = self.manifest.shards_for(split) if split is not None else list(self.manifest.shards)
        if not self.shards:
            raise InputError(f"{self.url}: no examples shards{f' in split {split!r}' if split else ''}")
        self.schema: pa.Schema | None = None
        self.units: list[_Unit] = self._units_from_index()
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
        # (epoch, start) for DataLoader workers that outlive an epoch: see ShardLoader
        self._shared_position = torch.zeros(2, dtype=torch.int64).share_memory_()

    def _open_filesystem(self) -> None:
        """(Re)connect; async filesystems such as gcsfs cannot be used across a fork, so a
        DataLoader worker opens its own."""
        self.fs, root = fsspec.core.url_to_fs(self.url, **self.storage_options)
        self._root = root.rstrip("/")
        self._pid = os.getpid()

    def _path(self, index: int) -> str:
        return f"{self._root}/{self.shards[index].path}"

    def _read_small(self, name: str) -> bytes | None:
        """A small file of the output folder in one request, or None when it does not exist."""
        path = f"{self._root}/{name}"

        def read() -> bytes | None:
            try:
                return self.fs.cat_file(path)
            except FileNotFoundError:
                return None

        return self._retrying(path, read)

    def _units_from_index(self) -> list[_Unit]:
        """Every non-empty record batch of the selected shards, from the index the manifest names
        (checked against the manifest: :meth:`ShardIndex.check_against`)."""
        reference = self.manifest.index
        if reference is None:
            raise InputError(
                f"{self.url}: no record-batch index ({INDEX_FILE}; written by `pipelines examples` "
                f"since it exists); add it with `pipelines index {self.url}`"
            )
        source = f"{self.url}/{reference.path}"
        if reference.num_bytes > MAX_INDEX_BYTES:
            raise InputError(
                f"{self.url}/{MANIFEST_FILE}: the index is {reference.num_bytes:,} bytes, more than the "
                f"{MAX_INDEX_BYTES:,} a reader takes; split the output into several folders"
            )
        self._check_inside([reference.path])
        data = self._read_small(reference.path)
        if data is None or not bytes_match(data, reference):
            what = "missing" if data is None else "differs from the SHA-256 in the manifest"
            raise InputError(f"{source}: {what}; rebuild it with `pipelines index {self.url} --overwrite`")
        index = ShardIndex.from_json(data, source)
        index.check_against(self.manifest, source)
        self._check_schema(index.schema, source)
        self._check_inside([shard.path for shard in self.shards])
        entries = {entry.path: entry for entry in index.shards}
        return [
            _Unit(i, k, b.offset, b.length, b.num_rows, b.sha256)
            for i, shard in enumerate(self.shards)
            for k, b in enumerate(entries[shard.path].batches)
            if b.num_rows
        ]

    def _check_inside(self, paths: list[str]) -> None:
        """Refuse a local file of the folder that a symlink takes outside it (paths themselves
        are checked when the manifest and index are parsed: relative, no ``..``)."""
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        if "file" not in protocols:
            return
        for path in paths:
            if path_leaves_folder(self._root, path):
                raise InputError(
                    f"{self.url}/{path}: a symbolic link to a file outside {self.url}; the shards of an "
                    "output are read only from inside it: copy the file into the folder"
                )

    def _check_schema(self, schema: pa.Schema, path: str) -> None:
        """Accept the shards' schema (recorded in the index) only if it is the examples format."""
        empty = schema.empty_table()
        try:
            examples_format(
                1 if schema.field("input_ids").type.value_type == pa.uint16() else 1 << 17
            ).validate(empty, path)
        except (KeyError, InputError) as err:
            raise ShardError(
                str(err) if isinstance(err, InputError) else f"{path}: no input_ids column"
            ) from None
        self.schema = schema

    # -- state -------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Batches this rank gets per epoch (independent of the resume point)."""
        return self.batches_per_epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next iterator yields, from its first batch (in this process and in
        the DataLoader workers of a :class:`ShardLoader`)."""
        self.epoch, self.batches_done, self._start = epoch, 0, 0
        self._shared_position.copy_(torch.tensor([epoch, 0]))

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
            "order": ORDER_VERSION,
        }

    def state_dict(self) -> dict[str, int]:
        """:meth:`state_at` the batches yielded in this process (see the module docstring)."""
        return self.state_at(self.batches_done)

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume: the next iterator skips this rank's first ``batches_done`` batches of ``epoch``.

        The order depends on the batch size, world size, streams, data and seed; a state saved
        under other values of these cannot continue the same order and is refused, as is one
        saved by a reader whose streams read other segments (``order`` 1, before
        :func:`pretrain.streams.segment_positions`; the same order for 1, 2 or 3 streams).
        """
        saved_order = state.get("order", 1)
        if saved_order != ORDER_VERSION and segment_positions(self.streams) != list(range(self.streams)):
            raise ValueError(
                f"the saved reader state is of reader order {saved_order}, this reader's is {ORDER_VERSION} "
                f"(streams read other segments of the epoch): finish the run with the release that started "
                "it, or start a new run"
            )
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
        self._shared_position.copy_(torch.tensor([self.epoch, self._start]))

    # -- order -------------------------------------------------------------------------------

    def _epoch_order(self) -> np.ndarray:
        if not self.shuffle:
            return np.arange(len(self.units))
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        return torch.randperm(len(self.units), generator=generator).numpy()

    def _row_order(self, unit: _Unit) -> np.ndarray:
        if not self.shuffle:
            return np.arange(unit.num_rows)
        return np.random.default_rng([self.seed, self.epoch, unit.shard, unit.batch]).permutation(
            unit.num_rows
        )

    def _my_batches(self, start: int) -> range:
        """This process's rank-local batch indexes from the resume point ``start``, in order: with
        ``W`` workers, worker ``w`` takes ``start + w``, ``start + w + W``, … — the DataLoader's
        round-robin over its workers then returns them in order from ``start``."""
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        if self.streams % workers:
            raise ValueError(
                f"{workers} DataLoader workers do not divide the {self.streams} streams per rank, so the "
                f"order would depend on them; use a number of workers that divides {self.streams}"
            )
        return range(start + worker, self.batches_per_epoch, workers)

    def _plan(self, order: np.ndarray) -> EpochPlan:
        rows = np.array([u.num_rows for u in self.units], np.int64)[order]
        return EpochPlan(
            rows,
            stream_rows=self.stream_rows,
            batch_size=self.batch_size,
            streams=self.streams,
            rank=self.rank,
        )

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

    def _read_unit(self, unit: _Unit) -> pa.RecordBatch:
        """Fetch just the unit's bytes, check them against their SHA-256, decode them, check the
        values (:func:`schemas.examples.example_batch_problem`) and permute the rows."""
        path = self._path(unit.shard)
        end = unit.offset + unit.length
        where = f"{path}: record batch {unit.batch}"
        data = self._retrying(
            f"{path} (record batch {unit.batch})", lambda: self.fs.cat_file(path, start=unit.offset, end=end)
        )
        if len(data) != unit.length or hashlib.sha256(data).hexdigest() != unit.sha256:
            raise ShardError(
                f"{where} (bytes {unit.offset}-{end}) differs from its SHA-256 in "
                f"{INDEX_FILE}; the shard was modified or damaged: restore it or regenerate the output "
                "with `pipelines examples`"
            )
        try:
            batch = ipc.read_record_batch(ipc.read_message(pa.py_buffer(data)), self.schema)
        except (OSError, pa.ArrowInvalid) as err:
            raise ShardError(f"{where} is unreadable ({err})") from None
        problem = (
            f"{batch.num_rows} rows, {INDEX_FILE} says {unit.num_rows}"
            if batch.num_rows != unit.num_rows
            else example_batch_problem(batch, ExampleLimits(self.vocab_size, self.max_seq_length))
        )
        if problem is not None:
            raise ShardError(
                f"{where}: {problem}; the output does not hold what `pipelines examples` writes "
                f"(for this vocabulary): regenerate it"
            )
        return batch.take(pa.array(self._row_order(unit)))

    def _prefetch(
        self, units: list[_Unit], plan: EpochPlan, batches: range, out: queue.Queue, stop: threading.Event
    ) -> None:
        """Read the ``units`` (in the epoch's order) that this process's ``batches`` need onto
        ``out``, in the order it first needs them, each once while it is needed (``plan.walk``)."""
        for _, pieces in plan.walk(batches):
            for piece in pieces:
                if not piece.load:
                    continue
                try:
                    item: object = self._read_unit(units[piece.unit])
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

    def _next_loaded(self, loaded: queue.Queue) -> object:
        """The prefetch thread's next unit; a :class:`ShardError` when it sends nothing for
        ``timeout_s`` (a read that hangs) instead of waiting for ever."""
        try:
            return loaded.get(timeout=self.timeout_s)
        except queue.Empty:
            raise ShardError(
                f"{self.url}: no data for {self.timeout_s:.0f} s (a read hangs: is the bucket reachable?); "
                "retry, or raise the timeout"
            ) from None

    def __iter__(self) -> Iterator[Batch | ReaderFailure]:
        if torch.utils.data.get_worker_info() is None:
            yield from self._batches()
            return
        # A DataLoader worker: take the epoch the main process set, and hand a ShardError over as
        # a value, so that ShardLoader raises it without the worker's traceback.
        self.epoch, self._start = (int(v) for v in self._shared_position.tolist())
        try:
            yield from self._batches()
        except ShardError as err:
            yield ReaderFailure(str(err))

    def _batches(self) -> Iterator[Batch]:
        if self._pid != os.getpid():
            self._open_filesystem()
        order = self._epoch_order()
        units = [self.units[i] for i in order]
        self.batches_done = self._start
        plan, batches = self._plan(order), self._my_batches(self._start)
        loaded: queue.Queue = queue.Queue(maxsize=self.prefetch)
        stop = threading.Event()
        thread = threading.Thread(
            target=self._prefetch, args=(units, plan, batches, loaded, stop), daemon=True
        )
        thread.start()
        try:
            tables: dict[int, pa.RecordBatch] = {}  # unit -> its rows, from its load to its release
            for j, pieces in plan.walk(batches):
                parts = []
                for piece in pieces:
                    if piece.load:
                        table = self._next_loaded(loaded)
                        if isinstance(table, BaseException):
                            raise table
                        tables[piece.unit] = table
                    parts.append(tables[piece.unit].slice(piece.lo, piece.hi - piece.lo))
                    if piece.release:
                        del tables[piece.unit]
                stream, index = self.rank * self.streams + j % self.streams, j // self.streams
                rng = None
                if self.masking is not None:
                    rng = np.random.default_rng([self.seed, self.epoch, stream, index, 1])
                self.batches_done += 1
                yield collate(pa.Table.from_batches(parts), self.masking, rng)
        finally:
            # The reading thread ends before the iterator does: one left inside Arrow or a read when
            # the interpreter exits aborts the process ("terminate called without an active
            # exception"), as it did after evaluation's early break. It stops at its next put.
            stop.set()
            thread.join(timeout=self.timeout_s)


def _max_seq_length(params: dict) -> int | None:
    """The sequence length the shards were written for (their manifest's parameters), if recorded."""
    pairs = params.get("pairs")
    value = (pairs.get("max_seq_length") if isinstance(pairs, dict) else None) or params.get("max_seq_length")
    return value if type(value) is int and value > 0 else None


class ShardLoader:
    """The DataLoader of a run over an :class:`ExampleShards`: one set of workers for every epoch.

    ``num_workers`` must divide the reader's streams (see the module docstring). The workers are
    ``persistent_workers``: :meth:`epoch` sets the reader's position, which the workers read at
    the start of each iterator. A :class:`ShardError` inside a worker is raised here with its
    own one-line message; a worker that dies, or sends nothing for ``timeout_s`` seconds, raises
    a :class:`ShardError` naming the shards instead of hanging the run.
    """

    def __init__(
        self,
        reader: ExampleShards,
        num_workers: int = 0,
        *,
        pin_memory: bool = False,
        timeout_s: float = 600.0,
    ) -> None:
        if num_workers < 0 or timeout_s <= 0:
            raise ValueError(f"need num_workers >= 0 and timeout_s > 0, got {num_workers} and {timeout_s}")
        self.reader, self.num_workers, self.timeout_s = reader, num_workers, timeout_s
        reader.timeout_s = timeout_s
        self.loader = torch.utils.data.DataLoader(
            reader,
            batch_size=None,
            num_workers=num_workers,
            pin_memory=pin_memory,
            persistent_workers=num_workers > 0,
            timeout=timeout_s if num_workers > 0 else 0,
            # the workers' base seed comes from this generator, not from the global RNG, so that
            # making a loader never changes the training's random stream
            generator=torch.Generator(),
        )

    def epoch(self, epoch: int, batches_done: int = 0) -> Iterator[Batch]:
        """This rank's batches of ``epoch`` after the first ``batches_done``, in order."""
        self.reader.load_state_dict(self.reader.state_at(batches_done, epoch))
        iterator = iter(self.loader)
        while True:
            try:
                batch = next(iterator)
            except StopIteration:
                return
            except (RuntimeError, ConnectionError) as err:
                if not self.is_worker_failure(err):
                    raise
                self._stop_workers(iterator)
                raise ShardError(worker_failure_message(self.reader.url, err, self.timeout_s)) from None
            if isinstance(batch, ReaderFailure):
                self._stop_workers(iterator)
                raise ShardError(batch.message)
            yield batch

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Wrap the loop that consumes :meth:`epoch`: torch reports a worker that dies (its
        SIGCHLD handler) at whatever the main process is doing, often the training step; this
        turns that report into the same one-line :class:`ShardError` as :meth:`epoch` raises."""
        try:
            yield
        except (RuntimeError, ConnectionError) as err:
            if not self.is_worker_failure(err):
                raise
            raise self.failure(err) from None

    def failure(self, err: Exception) -> ShardError:
        """The one-line :class:`ShardError` for torch's report ``err`` of a dead or silent worker
        (see :meth:`is_worker_failure`), after shutting the workers down."""
        self._stop_workers(self.loader._iterator)
        return ShardError(worker_failure_message(self.reader.url, err, self.timeout_s))

    def close(self) -> None:
        """Shut the workers down (they also go when the loader is garbage collected)."""
        self._stop_workers(self.loader._iterator)

    def is_worker_failure(self, err: Exception) -> bool:
        """Whether ``err`` is torch's report of a DataLoader worker that died or timed out, or a
        connection to a worker that died while handing over a batch."""
        if isinstance(err, ConnectionError):
            return self.num_workers > 0
        return str(err).startswith(("DataLoader worker", "DataLoader timed out"))

    def _stop_workers(self, iterator) -> None:
        """Shut the workers down after a failure and start new ones next epoch, so that a dead
        worker cannot make torch's SIGCHLD handler raise again later, somewhere else."""
        self.loader._iterator = None
        shutdown = getattr(iterator, "_shutdown_workers", None)  # absent without workers
        if shutdown is not None:
            try:
                shutdown()
            except RuntimeError:  # another worker's exit seen by that handler meanwhile
                pass


def worker_failure_message(url: str, err: Exception, timeout_s: float) -> str:
    """One line for torch's error about a DataLoader worker that died or timed out."""
    first = (str(err).splitlines() or [type(err).__name__])[0].strip().rstrip(".")
    return (
        f"{url}: {first}: a DataLoader worker died or sent nothing for "
        f"{timeout_s:.0f} s (out of memory? a hanging read?); fewer workers (--num-workers) or a retry "
        "may help"
    )
