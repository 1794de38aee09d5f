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
from apache_beam.options.pipeline_options import StandardOptions
from apache_beam.transforms.window import GlobalWindow
from apache_beam.utils.timestamp import MIN_TIMESTAMP
from apache_beam.utils.windowed_value import WindowedValue

from pipelines import files
from pipelines.jobs import DEFAULT_RUNNER, LOCAL_RUNNERS
from schemas import storage
from schemas.commands import InputError

SPILL_BYTES = 16 << 20
"""What a bundle holds (its pairs' JSON and ENTRY_BYTES each) before it sorts and writes its runs."""
ENTRY_BYTES = 200
"""What holding a pair costs beyond its JSON (its tuple, key and sort value)."""
NUM_PARTITIONS = 16
"""Partitions of the keys (each merged on its own) unless the keys are ``0 .. keys - 1``."""
MAX_RUNS_MERGED = 128
"""Runs read at once; more are first merged into fewer (files open at once stay bounded)."""

Reduce = Callable[[Any, Iterator[Any]], Iterable[Any]]


def runs_locally(pipeline: beam.Pipeline) -> bool:
    """Whether ``pipeline`` runs on one of Beam's local runners, which hold a shuffle in memory."""
    runner = str(pipeline.options.view_as(StandardOptions).runner or DEFAULT_RUNNER).rsplit(".", 1)[-1]
    return runner in LOCAL_RUNNERS


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
        self._bytes += len(line) + ENTRY_BYTES
        if self._bytes >= SPILL_BYTES:
            yield from self._runs()

    def finish_bundle(self):
        for ref in self._runs():
            yield WindowedValue(ref, MIN_TIMESTAMP, [GlobalWindow()])

    def _runs(self) -> Iterator[tuple[int, str]]:
        self._held.sort()  # by partition, key, order; ties by the line (no sort keys held)
        for partition, group in itertools.groupby(self._held, key=lambda held: held[0]):
            path = files.join(self._folder, f"{uuid.uuid4().hex}.jsonl")
            files.write_bytes(path, (held[3] + b"\n" for held in group), sync=False)
            yield partition, path
        self._held, self._bytes = [], 0


def _read_run(path: str) -> Iterator[tuple[Any, Any]]:
    with files.open_binary(path) as f:
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
            files.write_bytes(merged[-1], (_line(pair) + b"\n" for pair in pairs), sync=False)
        paths = merged
    yield from heapq.merge(*map(_read_run, paths), key=lambda kv: (kv[0], order(kv[1])))
    files.remove(paths)


def _line(pair) -> bytes:  # UTF-8, compact where a str with one wide character takes 4 bytes a character
    return json.dumps(pair, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class GroupOnDisk(beam.PTransform):
    """``(key, value)`` pairs → what ``reduce(key, values)`` gives for each key, the values sorted by
    ``order`` (an iterator: read as they are merged). Keys and values are JSON (tuples come back as
    lists); the runs go under ``out`` (its ``.temp``), and without it the values are grouped in memory.
    With ``keys=n`` the keys are ``0 .. n-1`` and each is reduced, with no values too."""

    def __init__(
        self, reduce: Reduce, out: storage.Folder | None, order=lambda value: 0, keys: int | None = None
    ):
        super().__init__()
        self._reduce, self._out, self._order, self._keys = reduce, out, order, keys

    def expand(self, pairs):
        parts = pairs if isinstance(pairs, tuple) else (pairs,)
        folder = None
        if self._out is not None and runs_locally(parts[0].pipeline):  # only the runs' paths are grouped
            name = f"{files.TEMP_DIR}/{uuid.uuid4().hex}"
            self._out.journal(f"{name}/")  # before workers write there
            folder = self._out.path(name)
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
