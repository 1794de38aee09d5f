"""Grouping by key in bounded memory. Beam's local runners hold every PCollection that crosses a
stage (a GroupByKey, a Flatten of several stages) in memory; there :class:`GroupOnDisk` writes each
bundle's pairs as sorted runs of JSON lines to temporary files, shuffles only the runs' paths, and
merges a partition's runs as it reads them, so a key's values reach ``reduce`` in order without
being held. Runners that shuffle out of memory themselves (Dataflow) get a GroupByKey.
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from pipelines import io
from schemas.commands import InputError
from schemas.outputs import journal
from wordpiece.beam_jobs import LOCAL_RUNNERS

SPILL_BYTES = 16 << 20
"""JSON a bundle holds before it sorts and writes its runs."""
NUM_PARTITIONS = 16
"""Partitions of the keys (each merged on its own) unless the keys are ``0 .. keys - 1``."""
MAX_RUNS_MERGED = 128
"""Runs read at once; more are first merged into fewer (files open at once stay bounded)."""

Reduce = Callable[[Any, Iterator[Any]], Iterable[Any]]


def spill_folder(pipeline: beam.Pipeline, output: str | None) -> str | None:
    """Where ``pipeline``'s shuffled data goes: ``OUTPUT/.temp`` on a local runner, else (or without
    ``output``) None."""
    runner = str(pipeline.options.view_as(StandardOptions).runner or "DirectRunner").rsplit(".", 1)[-1]
    return io.join(output, io.TEMP_DIR) if output and runner in LOCAL_RUNNERS else None


class _WriteRuns(beam.DoFn):
    """A bundle's ``(key, value)`` pairs as sorted runs, one file per partition (the key itself with
    ``keys``, else a hash of it) every SPILL_BYTES; emits ``(partition, path)``."""

    def __init__(self, folder: str, keys: int | None, order: Callable[[Any], Any]):
        self._folder, self._keys, self._order = folder, keys, order

    def start_bundle(self) -> None:
        self._held, self._bytes = [], 0

    def process(self, pair):
        key, value = pair
        line = _line(pair)
        partition = key if self._keys else int(hashlib.sha256(str(key).encode()).hexdigest()[:8], 16)
        self._held.append((partition % (self._keys or NUM_PARTITIONS), key, self._order(value), line))
        self._bytes += len(line)
        if self._bytes >= SPILL_BYTES:
            yield from self._runs()

    def finish_bundle(self):
        for ref in self._runs():
            yield WindowedValue(ref, MIN_TIMESTAMP, [GlobalWindow()])

    def _runs(self) -> Iterator[tuple[int, str]]:
        self._held.sort(key=lambda held: held[:3])
        for partition, group in itertools.groupby(self._held, key=lambda held: held[0]):
            path = io.join(self._folder, f"{uuid.uuid4().hex}.jsonl")
            io.write_bytes(path, "".join(held[3] + "\n" for held in group).encode("utf-8"))
            yield partition, path
        self._held, self._bytes = [], 0


def _read_run(path: str) -> Iterator[tuple[Any, Any]]:
    with io.open_binary(path) as f:
        for line in f:
            try:
                key, value = json.loads(line)
            except (ValueError, TypeError):
                raise InputError(f"{path}: not a temporary file this run wrote (changed meanwhile)") from None
            yield key, value


def _merge(paths: list[str], order: Callable[[Any], Any]) -> Iterator[tuple[Any, Any]]:
    """The pairs of sorted runs in (key, order) order, each run deleted once read; past
    MAX_RUNS_MERGED runs, they are first merged in rounds into fewer."""
    while len(paths) > MAX_RUNS_MERGED:
        merged = []
        for first in range(0, len(paths), MAX_RUNS_MERGED):
            merged.append(f"{paths[first].rsplit('/', 1)[0]}/{uuid.uuid4().hex}.jsonl")
            pairs = _merge(paths[first : first + MAX_RUNS_MERGED], order)
            io.write_bytes(merged[-1], ((_line(pair) + "\n").encode("utf-8") for pair in pairs))
        paths = merged
    yield from heapq.merge(*map(_read_run, paths), key=lambda kv: (kv[0], order(kv[1])))
    FileSystems.delete(paths)


def _line(pair) -> str:
    return json.dumps(pair, ensure_ascii=False, separators=(",", ":"))


class GroupOnDisk(beam.PTransform):
    """``(key, value)`` pairs → what ``reduce(key, values)`` gives for each key, the values sorted by
    ``order`` (an iterator: read as they are merged). Keys and values are JSON (tuples come back as
    lists); the runs go under ``output`` (``.temp``), and without it the values are grouped in memory.
    With ``keys=n`` the keys are ``0 .. n-1`` and each is reduced, with no values too."""

    def __init__(self, reduce: Reduce, output: str | None, order=lambda value: 0, keys: int | None = None):
        super().__init__()
        self._reduce, self._output, self._order, self._keys = reduce, output, order, keys

    def expand(self, pairs):
        parts = pairs if isinstance(pairs, tuple) else (pairs,)
        folder = spill_folder(parts[0].pipeline, self._output)
        if folder is not None:  # a local runner: only the runs' paths are grouped, by partition
            folder = f"{folder}/{uuid.uuid4().hex}"
            journal(f"{folder}/")  # before workers write there
            write = _WriteRuns(folder, self._keys, self._order)
            parts = tuple(part | f"Write runs {i}" >> beam.ParDo(write) for i, part in enumerate(parts))
        every = range(self._keys or (NUM_PARTITIONS if folder else 0))
        grouped = (
            (*parts, parts[0].pipeline | "Every key" >> beam.Create([(k, None) for k in every]))
            | "Merge" >> beam.Flatten()
            | "Group" >> beam.GroupByKey()
        )
        return grouped | "Reduce" >> beam.FlatMap(_reduce, self._reduce, self._order, self._keys, folder)


def _reduce(group: tuple, reduce: Reduce, order, keys: int | None, folder: str | None) -> Iterator:
    """``reduce`` over a group (a key and its values, in memory) or a partition (its runs, merged)."""
    key, values = group[0], [v for v in group[1] if v is not None]
    if folder is None:
        yield from reduce(key, iter(sorted(values, key=order)))
        return
    reduced = False
    for key, pairs in itertools.groupby(_merge(sorted(values), order) if values else (), lambda kv: kv[0]):
        reduced = True
        yield from reduce(key, (value for _, value in pairs))
    if keys and not reduced:  # the partition is the key
        yield from reduce(group[0], iter(()))


def remove_folder(folder: str) -> int:
    """Delete ``folder`` and every file under it (local or bucket); how many files were deleted."""
    files = [m.path for m in FileSystems.match([io.join(folder, "**")])[0].metadata_list]
    if files:
        FileSystems.delete(files)
    if FileSystems.exists(folder):  # a local directory (buckets have no empty folders)
        FileSystems.delete([folder])
    return len(files)
