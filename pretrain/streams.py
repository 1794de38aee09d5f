"""Where a rank's batches come from: streams, their place in the epoch's sequence, and the record
batches (units) a process reads for them, each once.

The epoch's sequence of ``N`` examples (units in the epoch's order, rows permuted inside each) is
cut into ``world_size × streams`` segments of ``L`` examples. Rank ``r`` owns segments ``r·S …
r·S + S − 1`` (``S`` = streams); its stream ``v`` reads segment ``r·S + position(v)``
(:func:`segment_positions`) and its batch ``j`` is batch ``j // S`` of stream ``j % S``. A process
(a rank, or one DataLoader worker of it) reads the batches of some of its streams; a unit that
several of them need — one that straddles the boundary of two adjacent segments — is read when the
first of them needs it and kept until the last is done with it (:meth:`EpochPlan.walk`), so each
unit is fetched once per process.

``position`` reverses the digits of ``v`` (bit reversal when ``S`` is a power of two: 0, 4, 2, 6,
1, 5, 3, 7 for 8). A DataLoader with ``W`` workers hands worker ``w`` the streams ``v ≡ w + start
(mod W)``; with the reversal their segments are adjacent whenever ``W`` is a product of the
smallest prime factors of ``S`` (every divisor of a power of two), so the only units fetched by two
processes of a rank are the ``W − 1`` that straddle its workers' blocks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np


def segment_positions(streams: int) -> list[int]:
    """``positions[v]``: which of the rank's segments stream ``v`` reads (see the module docstring)."""
    factors, rest, p = [], streams, 2
    while rest > 1:
        while rest % p == 0:
            factors.append(p)
            rest //= p
        p += 1
    positions = []
    for v in range(streams):
        position, digits, size = 0, v, streams
        for p in factors:
            size //= p
            position += (digits % p) * size
            digits //= p
        positions.append(position)
    return positions


@dataclass(frozen=True)
class Piece:
    """Rows ``[lo, hi)`` of the unit at ``unit`` in the epoch's order, for one batch. ``load``: the
    process reads the unit here; ``release``: no batch of the process needs it after this one."""

    unit: int
    lo: int
    hi: int
    load: bool
    release: bool


class EpochPlan:
    """The streams of one rank in one epoch over units of ``unit_rows`` rows (in the epoch's order)."""

    def __init__(
        self, unit_rows: np.ndarray, *, stream_rows: int, batch_size: int, streams: int, rank: int
    ) -> None:
        self.starts = np.concatenate([[0], np.cumsum(unit_rows, dtype=np.int64)])
        self.num_examples = int(self.starts[-1])
        self.stream_rows, self.batch_size, self.streams = stream_rows, batch_size, streams
        self.first_segment = rank * streams
        self.positions = segment_positions(streams)

    def stream_start(self, stream: int) -> int:
        """Where stream ``stream`` of this rank starts in the epoch's sequence (before wrapping
        around to its start, for ``drop_last=False``)."""
        return (self.first_segment + self.positions[stream]) * self.stream_rows

    def _spans(self, start: int, stop: int, stream_stop: int) -> Iterator[tuple[int, int, int, bool]]:
        """``(unit, lo, hi, ends)`` for the examples ``[start, stop)`` of the sequence (wrapping
        around it); ``ends``: the piece reaches the end of its unit or of its stream (``stream_stop``),
        so that its stream's visit of the unit is over."""
        pos = start
        while pos < stop:
            wrapped = pos % self.num_examples
            unit = int(np.searchsorted(self.starts, wrapped, side="right")) - 1
            unit_start, unit_end = int(self.starts[unit]), int(self.starts[unit + 1])
            take = min(stop - pos, unit_end - wrapped)
            pos += take
            lo = wrapped - unit_start
            yield unit, lo, lo + take, wrapped + take == unit_end or pos == stream_stop

    def _visits(self, first_index: dict[int, int]) -> np.ndarray:
        """How many visits (runs of one stream's rows) each unit gets from the given streams, from
        their batch ``first_index[stream]`` on: one per unit per pass of a stream over it."""
        change = np.zeros(len(self.starts), np.int64)
        for stream, index in first_index.items():
            pos = self.stream_start(stream) + index * self.batch_size
            stop = self.stream_start(stream) + self.stream_rows
            while pos < stop:  # one pass; more only when the data is shorter than a stream
                wrapped = pos % self.num_examples
                take = min(stop - pos, self.num_examples - wrapped)
                first = int(np.searchsorted(self.starts, wrapped, side="right")) - 1
                last = int(np.searchsorted(self.starts, wrapped + take - 1, side="right")) - 1
                change[first] += 1
                change[last + 1] -= 1
                pos += take
        return np.cumsum(change)[:-1]

    def walk(self, batches: range) -> Iterator[tuple[int, list[Piece]]]:
        """``(j, pieces)`` for each of the rank's batches ``j`` in ``batches`` (one process's:
        every batch of its streams from the resume point on, ascending), with each unit loaded
        when the first of the process's streams needs it and released after the last."""
        first_index = {}
        for j in batches[: self.streams]:
            first_index.setdefault(j % self.streams, j // self.streams)
        remaining = self._visits(first_index)
        held: set[int] = set()
        for j in batches:
            stream, index = j % self.streams, j // self.streams
            start = self.stream_start(stream) + index * self.batch_size
            stream_stop = self.stream_start(stream) + self.stream_rows
            pieces = []
            for unit, lo, hi, ends in self._spans(start, start + self.batch_size, stream_stop):
                load = unit not in held
                held.add(unit)
                if ends:
                    remaining[unit] -= 1
                release = ends and remaining[unit] <= 0
                if release:
                    held.discard(unit)
                pieces.append(Piece(unit, lo, hi, load, release))
            yield j, pieces
