"""Where a rank's batches come from: the epoch cut into ``world_size × S`` segments, stream ``v`` of
rank ``r`` reading segment ``r·S`` + ``v`` digit-reversed, so a DataLoader worker's streams are
adjacent and each unit (record batch) a process needs is fetched once (:meth:`EpochPlan.walk`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np


def segment_positions(streams: int) -> list[int]:
    """``positions[v]``: which of the rank's segments stream ``v`` reads (see the module docstring)."""
    factors, rest = [], streams
    for p in range(2, streams + 1):
        while rest % p == 0:
            factors.append(p)
            rest //= p
    positions = []
    for v in range(streams):
        position, size = 0, streams
        for p in factors:
            size //= p
            position, v = position + v % p * size, v // p
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

    def __init__(self, unit_rows: np.ndarray, stream_rows: int, batch_size: int, streams: int, rank: int):
        self.starts = np.concatenate([[0], np.cumsum(unit_rows, dtype=np.int64)])
        self.num_examples = int(self.starts[-1])
        self.stream_rows, self.batch_size, self.streams = stream_rows, batch_size, streams
        self.first_segment = rank * streams
        self.positions = segment_positions(streams)

    def spans(self, j: int) -> list[tuple[int, int, int]]:
        """``(unit, lo, hi)``: the rows of the rank's batch ``j`` (batch ``j // streams`` of stream
        ``j % streams``), wrapping around the end of the sequence."""
        segment = self.first_segment + self.positions[j % self.streams]
        pos = segment * self.stream_rows + j // self.streams * self.batch_size
        stop, found = pos + self.batch_size, []
        while pos < stop:
            wrapped = pos % self.num_examples
            unit = int(np.searchsorted(self.starts, wrapped, side="right")) - 1
            take = min(stop - pos, int(self.starts[unit + 1]) - wrapped)
            lo = wrapped - int(self.starts[unit])
            found.append((unit, lo, lo + take))
            pos += take
        return found

    def walk(self, batches: range) -> Iterator[tuple[int, list[Piece]]]:
        """``(j, pieces)`` for each of one process's batches ``j`` in ``batches`` (ascending),
        each unit loaded at its first need and released after its last."""
        last = {unit: j for j in batches for unit, _, _ in self.spans(j)}
        held: set[int] = set()
        for j in batches:
            spans, pieces = self.spans(j), []
            for i, (unit, lo, hi) in enumerate(spans):
                load = unit not in held
                held.add(unit)
                release = last[unit] == j and all(u != unit for u, _, _ in spans[i + 1 :])
                if release:
                    held.discard(unit)
                pieces.append(Piece(unit, lo, hi, load, release))
            yield j, pieces
