"""Stream pre-training batches from an ``examples`` output folder (local path or bucket URL).

:class:`ExampleShards` (an ``IterableDataset``) yields one rank's padded batches; :class:`ShardLoader`
runs it in DataLoader workers. A *unit* is one record batch of one shard. Epoch ``e`` permutes the
units (seed ``seed + e``) and the rows of each (``(seed, e, shard, batch)``), and cuts the sequence
into streams (:mod:`pretrain.streams`): a rank's batch ``j`` is batch ``j // streams`` of its
stream ``j % streams``, the same for any number of workers that divides ``streams``, each unit
fetched once per process. Building the reader reads ``manifest.json``, ``COMPLETED`` and the
record-batch index alone; each unit is one ranged read, checked against its SHA-256 and its values
(:func:`schemas.examples.example_batch_problem`), I/O errors retried. Every problem is one
:class:`~schemas.commands.InputError` naming the file and record batch. A resume
(``load_state_dict``) skips the consumed batches without reading units of consumed examples.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import logging
import os
import time
from collections import deque
from collections.abc import Iterator
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import torch

from pretrain.collate import Batch, DynamicMasking, collate
from pretrain.streams import EpochPlan
from schemas import COMPLETED_FILE, MANIFEST_FILE, storage, verify_completed
from schemas.commands import InputError
from schemas.examples import EXAMPLES_VERSION, ExampleLimits, example_batch_problem, examples_format
from schemas.index import INDEX_FILE, MAX_INDEX_BYTES, ShardIndex
from schemas.manifest import bytes_match, path_leaves_folder

log = logging.getLogger(__name__)
_REBUILD = "rebuild the shards with `pipelines examples`"
_STATE_KEYS = ("batch_size", "world_size", "streams", "num_examples", "seed")


@dataclass(frozen=True)
class _Unit:
    shard: int
    batch: int  # record-batch index inside the shard
    offset: int  # byte range of the record-batch message (metadata + body)
    length: int
    num_rows: int
    sha256: str  # of those bytes, from the index


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
        streams: int | None = None,
        masking: DynamicMasking | None = None,
        vocab_sha256: str | None = None,
        vocab_size: int | None = None,
        prefetch: int = 2,
        retries: int = 6,
        timeout_s: float = 600.0,
    ) -> None:
        self.url, self.batch_size, self.seed = url.rstrip("/"), batch_size, seed
        self.rank, self.world_size, self.shuffle, self.drop_last = rank, world_size, shuffle, drop_last
        self.masking, self.prefetch, self.retries, self.timeout_s = masking, prefetch, retries, timeout_s
        self.vocab_size = vocab_size  # token ids must be below it; settable later
        self._open_filesystem()
        manifest, marker = self._read_small(MANIFEST_FILE), self._read_small(COMPLETED_FILE)
        if manifest is None:
            raise InputError(
                f"{self.url}: no {MANIFEST_FILE}; give the output folder of `pipelines examples`"
            )
        try:
            self.manifest = verify_completed(
                manifest.decode(), marker and marker.decode(), self.url, "examples"
            )
            if self.manifest.format_version != EXAMPLES_VERSION:
                raise InputError(
                    f"{self.url}: shards of format version {self.manifest.format_version}; this trainer "
                    f"reads version {EXAMPLES_VERSION}: {_REBUILD}"
                )
            self.params: dict = dict(self.manifest.params)
            self.manifest_sha256 = hashlib.sha256(manifest).hexdigest()  # which shards a resume reads on
            recorded = self.params.get("vocab_sha256")
            if vocab_sha256 is not None and recorded != vocab_sha256:
                raise InputError(
                    f"{self.url}/{MANIFEST_FILE}: the shards were written with the vocabulary of SHA-256 "
                    f"{recorded}, not the given one ({vocab_sha256}); use the vocabulary they were made with"
                )
            self.shards = list(self.manifest.shards)
            self.units = self._units_from_index()
        except (ValueError, UnicodeDecodeError) as err:
            raise InputError(str(err)) from None
        pairs = self.params["pairs"] if isinstance(self.params.get("pairs"), dict) else {}
        length = pairs.get("max_seq_length") or self.params.get("max_seq_length")
        self.max_seq_length = length if type(length) is int and length > 0 else None
        self.num_examples = n = sum(u.num_rows for u in self.units)
        self.streams = streams or auto_streams(n, world_size, batch_size)
        total = world_size * self.streams * batch_size
        self.stream_rows = (n // total if drop_last else -(-n // total)) * batch_size
        if self.stream_rows == 0:
            raise InputError(
                f"{self.url}: {n} examples are too few for {world_size} rank(s) × {self.streams} stream(s) "
                f"of batches of {batch_size}; lower the batch size or the streams per rank"
            )
        self.batches_per_epoch = self.streams * self.stream_rows // batch_size
        used = world_size * self.streams * self.stream_rows  # examples of the epoch not seen, seen twice:
        self.dropped_examples, self.padded_examples = max(0, n - used), max(0, used - n)
        self.epoch = self.batches_done = self._start = 0  # _start: where the next iterator begins

    def _open_filesystem(self) -> None:
        """(Re)connect: a DataLoader worker opens its own (gcsfs cannot be used across a fork)."""
        self.fs, self._root = storage.filesystem(self.url)
        self._pid = os.getpid()

    def _read_small(self, name: str) -> bytes | None:
        """A small file of the output folder in one request, or None when it does not exist."""
        return self._retrying(f"{self._root}/{name}", lambda: self.fs.cat_file(f"{self._root}/{name}"), True)

    def _units_from_index(self) -> list[_Unit]:
        """Every non-empty record batch of the shards, from the index the manifest names, all checked."""
        reference = self.manifest.index
        if reference is None:
            raise InputError(f"{self.url}: no record-batch index ({INDEX_FILE}); {_REBUILD}")
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
            raise InputError(
                f"{source}: {what}; rebuild the shards with `pipelines examples ... --output {self.url} "
                f"--overwrite` (the params of {MANIFEST_FILE} record the settings they were made with)"
            )
        index = ShardIndex.from_json(data, source)
        index.check_against(self.manifest, source)
        if "input_ids" not in index.schema.names:
            raise InputError(f"{source}: no input_ids column")
        wide = index.schema.field("input_ids").type.value_type != pa.uint16()
        examples_format(1 << 17 if wide else 1).validate(index.schema.empty_table(), source)
        self.schema = index.schema
        self._check_inside([shard.path for shard in self.shards])
        entries = {entry.path: entry for entry in index.shards}
        return [
            _Unit(i, k, b.offset, b.length, b.num_rows, b.sha256)
            for i, shard in enumerate(self.shards)
            for k, b in enumerate(entries[shard.path].batches)
            if b.num_rows
        ]

    def _check_inside(self, paths: list[str]) -> None:
        """Refuse a local file of the folder that a symlink takes outside it."""
        protocols = self.fs.protocol if isinstance(self.fs.protocol, tuple) else (self.fs.protocol,)
        for path in paths if "file" in protocols else []:
            if path_leaves_folder(self._root, path):
                raise InputError(
                    f"{self.url}/{path}: a symbolic link to a file outside {self.url}; the shards of an "
                    "output are read only from inside it: copy the file into the folder"
                )

    def __len__(self) -> int:
        """Batches this rank gets per epoch (independent of the resume point)."""
        return self.batches_per_epoch

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch the next iterator yields, from its first batch."""
        self.epoch, self.batches_done, self._start = epoch, 0, 0

    def state_at(self, batches_done: int, epoch: int | None = None) -> dict[str, int]:
        """The resume state after this rank consumed ``batches_done`` batches of ``epoch``."""
        state = {key: getattr(self, key) for key in (*_STATE_KEYS, "manifest_sha256")}
        return state | {"epoch": self.epoch if epoch is None else epoch, "batches_done": batches_done}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Resume: the next iterator skips this rank's first ``batches_done`` batches of ``epoch``.
        A state saved under another batch size, world size, streams, data or seed is refused."""
        if (then := state.get("manifest_sha256", self.manifest_sha256)) != self.manifest_sha256:
            raise ValueError(
                f"the shards at {self.url} were rewritten since it read them ({MANIFEST_FILE}'s SHA-256 "
                f"{str(then)[:12]}… then, {self.manifest_sha256[:12]}… now): give the shards it read"
            )
        for key in _STATE_KEYS:
            if state.get(key) != getattr(self, key):
                raise ValueError(
                    f"it was saved with {key}={state.get(key)}, this run has {getattr(self, key)}"
                )
        epoch, done = state.get("epoch"), state.get("batches_done")
        if type(epoch) is not int or epoch < 0 or type(done) is not int or not 0 <= done <= len(self):
            raise ValueError(f"the saved position (epoch {epoch}, batch {done}) is not one of these shards")
        self.epoch, self.batches_done, self._start = epoch, done, done

    def _epoch_order(self) -> np.ndarray:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(len(self.units), generator=generator)
        return order.numpy() if self.shuffle else np.arange(len(self.units))

    def _row_order(self, unit: _Unit) -> np.ndarray:
        rng = np.random.default_rng([self.seed, self.epoch, unit.shard, unit.batch])
        return rng.permutation(unit.num_rows) if self.shuffle else np.arange(unit.num_rows)

    def _my_batches(self, start: int) -> range:
        """This process's batch indexes from ``start`` on: worker ``w`` of ``W`` takes ``start +
        w``, ``start + w + W``, …, which the DataLoader's round robin returns in order."""
        info = torch.utils.data.get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        if self.streams % workers:
            raise ValueError(f"{workers} DataLoader workers do not divide {self.streams} streams")
        return range(start + worker, self.batches_per_epoch, workers)

    def _retrying(self, what: str, read, missing_ok: bool = False):
        """``read()``, retried with back-off (1, 2, 4, … s) on I/O errors other than a missing
        file (None when ``missing_ok``), up to ``retries`` times; then :class:`InputError`."""
        for attempt in range(self.retries + 1):
            try:
                return read()
            except FileNotFoundError:
                if missing_ok:
                    return None
                raise InputError(f"{what}: missing (deleted after the manifest was checked?)") from None
            except OSError as err:
                if attempt == self.retries:
                    raise InputError(
                        f"{what}: unreadable after {self.retries + 1} attempts ({err})"
                    ) from None
                delay = min(2.0**attempt, 30.0)
                log.warning("%s: %s; retrying in %.0f s (%d/%d)", what, err, delay, attempt + 1, self.retries)
                time.sleep(delay)
                self.fs.invalidate_cache()

    def _read_unit(self, unit: _Unit) -> pa.RecordBatch:
        """Fetch just the unit's bytes, check them, decode them, check the values and permute the rows."""
        path = f"{self._root}/{self.shards[unit.shard].path}"
        span = (unit.offset, unit.offset + unit.length)
        where = f"{path}: record batch {unit.batch}"
        read = functools.partial(self.fs.cat_file, path, start=span[0], end=span[1])
        data = self._retrying(f"{path} (record batch {unit.batch})", read)
        if len(data) != unit.length or hashlib.sha256(data).hexdigest() != unit.sha256:
            raise InputError(
                f"{where} (bytes {span[0]}-{span[1]}) differs from its SHA-256 in {INDEX_FILE}; the shard "
                "was modified or damaged: restore it or regenerate the output with `pipelines examples`"
            )
        try:
            batch = ipc.read_record_batch(ipc.read_message(pa.py_buffer(data)), self.schema)
        except (OSError, pa.ArrowInvalid) as err:
            raise InputError(f"{where} is unreadable ({err})") from None
        problem = (
            f"{batch.num_rows} rows, {INDEX_FILE} says {unit.num_rows}"
            if batch.num_rows != unit.num_rows
            else example_batch_problem(batch, ExampleLimits(self.vocab_size, self.max_seq_length))
        )
        if problem is not None:
            raise InputError(
                f"{where}: {problem}; the output does not hold what `pipelines examples` writes "
                "(for this vocabulary): regenerate it"
            )
        return batch.take(pa.array(self._row_order(unit)))

    def __iter__(self) -> Iterator[Batch | InputError]:
        try:
            yield from self._batches()
        except InputError as err:
            if torch.utils.data.get_worker_info() is None:
                raise
            yield err  # a DataLoader worker hands its error over as a value: torch adds its traceback

    def _batches(self) -> Iterator[Batch]:
        if self._pid != os.getpid():
            self._open_filesystem()
        units = [self.units[i] for i in self._epoch_order()]
        rows = np.array([u.num_rows for u in units], np.int64)
        plan = EpochPlan(rows, self.stream_rows, self.batch_size, self.streams, self.rank)
        self.batches_done = self._start
        batches = self._my_batches(self._start)
        # one thread reads the units ahead, in the order they are first needed, each once
        loads = (units[p.unit] for _, pieces in plan.walk(batches) for p in pieces if p.load)
        pool, hung = ThreadPoolExecutor(1), False
        read = functools.partial(pool.submit, self._read_unit)
        ahead = deque(map(read, itertools.islice(loads, self.prefetch)))
        try:
            tables: dict[int, pa.RecordBatch] = {}  # unit -> its rows, from its load to its release
            for j, pieces in plan.walk(batches):
                parts = []
                for piece in pieces:
                    if piece.load:
                        try:
                            tables[piece.unit] = ahead.popleft().result(timeout=self.timeout_s)
                        except futures.TimeoutError:
                            hung = True
                            raise InputError(
                                f"{self.url}: no data for {self.timeout_s:.0f} s (a read hangs: is the bucket "
                                "reachable?); retry, or raise the timeout"
                            ) from None
                        ahead.extend(map(read, itertools.islice(loads, 1)))
                    parts.append(tables[piece.unit].slice(piece.lo, piece.hi - piece.lo))
                    if piece.release:
                        del tables[piece.unit]
                rng = None
                if self.masking is not None:
                    stream = self.rank * self.streams + j % self.streams
                    rng = np.random.default_rng([self.seed, self.epoch, stream, j // self.streams, 1])
                self.batches_done += 1
                yield collate(pa.Table.from_batches(parts), self.masking, rng)
        finally:  # no read left running inside Arrow when the interpreter exits (unless one hangs)
            pool.shutdown(wait=not hung, cancel_futures=True)


class ShardLoader:
    """The DataLoader of a run over an :class:`ExampleShards` (``num_workers`` must divide its
    streams); :meth:`epoch` starts the workers for one epoch from a resume point. A worker that dies
    or is silent for ``timeout_s`` is torch's ``RuntimeError`` (:func:`pretrain.train.worker_failure`)."""

    def __init__(
        self, reader: ExampleShards, num_workers: int = 0, *, pin_memory=False, timeout_s=600.0
    ) -> None:
        self.reader, self.num_workers, self.timeout_s = reader, num_workers, timeout_s
        reader.timeout_s = timeout_s
        self.loader = torch.utils.data.DataLoader(
            reader,
            batch_size=None,
            num_workers=num_workers,
            pin_memory=pin_memory,
            timeout=timeout_s if num_workers else 0,
            generator=torch.Generator(),  # the workers' seeds: never drawn from the global RNG
        )

    def epoch(self, epoch: int, batches_done: int = 0) -> Iterator[Batch]:
        """This rank's batches of ``epoch`` after the first ``batches_done``, in order."""
        self.reader.load_state_dict(self.reader.state_at(batches_done, epoch))
        batches = iter(self.loader)  # its workers shut down when it is released
        try:
            for batch in batches:
                if isinstance(batch, InputError):
                    raise InputError(str(batch))
                yield batch
        finally:
            del batches
