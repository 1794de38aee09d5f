"""Each record batch fetched once per process: streams' segments (``pretrain/streams.py``) and the
bytes the ranks of an epoch read together, counted at the filesystem."""

from __future__ import annotations

import types

import fsspec
import numpy as np
import pytest
import torch

from pretrain.data import ExampleShards, ShardLoader
from pretrain.streams import EpochPlan, segment_positions
from tests.unit.test_pretrain_data import _uids, _write_folder

RANKS, STREAMS, BATCH = 4, 8, 8


@pytest.mark.parametrize("streams", [1, 2, 3, 4, 6, 8, 12, 16])
def test_the_streams_of_a_worker_read_adjacent_segments(streams):
    positions = segment_positions(streams)
    assert sorted(positions) == list(range(streams))
    if streams == 8:
        assert positions == [0, 4, 2, 6, 1, 5, 3, 7]
    # worker counts that are products of the smallest prime factors (12 = 2·2·3: 1, 2, 4 and 12)
    chain, rest = [1], streams
    for p in (2, 3):
        while rest % p == 0:
            rest //= p
            chain.append(chain[-1] * p)
    for workers in chain:
        for worker in range(workers):
            mine = sorted(positions[v] for v in range(streams) if v % workers == worker)
            assert mine == list(range(mine[0], mine[0] + len(mine))), (streams, workers, worker)


def _held_counts(plan: EpochPlan, batches: range) -> tuple[list[int], dict[int, int]]:
    """Units held after each batch of a walk, and how often each unit was loaded."""
    held, loads, sizes = set(), {}, []
    for _, pieces in plan.walk(batches):
        for piece in pieces:
            if piece.load:
                assert piece.unit not in held
                loads[piece.unit] = loads.get(piece.unit, 0) + 1
                held.add(piece.unit)
            assert piece.unit in held
            if piece.release:
                held.remove(piece.unit)
        sizes.append(len(held))
    assert not held  # everything is released by the end of the epoch
    return sizes, loads


@pytest.mark.parametrize("unit_rows", [64, 23, 200])
@pytest.mark.parametrize("start", [0, 13])
def test_a_process_loads_each_unit_once_and_holds_few(unit_rows, start):
    rng = np.random.default_rng(unit_rows)
    rows = rng.integers(unit_rows // 2, unit_rows + 1, 60)
    stream_rows = int(rows.sum()) // (RANKS * STREAMS * BATCH) * BATCH
    for workers in (1, 2, 4, 8):
        for worker in range(workers):
            plan = EpochPlan(rows, stream_rows=stream_rows, batch_size=BATCH, streams=STREAMS, rank=2)
            batches = range(start + worker, STREAMS * stream_rows // BATCH, workers)
            sizes, loads = _held_counts(plan, batches)
            assert set(loads.values()) == {1}
            # a current unit per stream and one kept for the stream before it, at most
            assert max(sizes) <= 2 * STREAMS // workers


def test_padded_streams_that_wrap_around_load_each_visit_once():
    """drop_last=False with less data than one stream: the sequence is read more than once."""
    rows = np.array([5, 3])
    plan = EpochPlan(rows, stream_rows=24, batch_size=4, streams=2, rank=0)
    pieces = [p for _, batch in plan.walk(range(12)) for p in batch]
    assert sum(p.hi - p.lo for p in pieces) == 48
    _held_counts(plan, range(12))


def _counting_reads(monkeypatch) -> torch.Tensor:
    """[bytes, requests] fetched by ranged reads of local files, in this process and in the
    DataLoader workers it forks (shared memory)."""
    counts = torch.zeros(2, dtype=torch.int64).share_memory_()
    original = fsspec.implementations.local.LocalFileSystem.cat_file

    def counted(self, path, start=None, end=None, **kwargs):
        data = original(self, path, start=start, end=end, **kwargs)
        if start is not None:  # a record batch, not manifest.json, COMPLETED or index.json
            counts[0] += len(data)
            counts[1] += 1
        return data

    monkeypatch.setattr(fsspec.implementations.local.LocalFileSystem, "cat_file", counted)
    return counts


@pytest.fixture(scope="module")
def eight_shards(tmp_path_factory) -> str:
    """8 shards of 5 record batches (4 of 64 examples, 1 of 32; 2,304 in all)."""
    return _write_folder(str(tmp_path_factory.mktemp("fetch") / "ex"), shard_rows=(288,) * 8, batch_rows=64)


def _epoch(url: str, rank: int, workers: int) -> list[list[int]]:
    reader = ExampleShards(url, batch_size=BATCH, seed=7, rank=rank, world_size=RANKS, streams=STREAMS)
    return [_uids(b) for b in ShardLoader(reader, workers).epoch(0)]


@pytest.mark.parametrize("workers", [0, 2])
def test_four_ranks_read_the_dataset_about_once(eight_shards, monkeypatch, workers):
    """4 ranks × 8 streams over 40 record batches (1.1 per stream): together they read each
    record batch once, but for those that straddle the segments of two processes (ranks, or
    workers of a rank): 1.08x the dataset's bytes in process, 1.16x with 2 workers per rank
    (the reader that fetched a record batch once per stream read 1.79x here)."""
    reader = ExampleShards(eight_shards, batch_size=BATCH, seed=7, world_size=RANKS, streams=STREAMS)
    dataset_bytes = sum(u.length for u in reader.units)
    assert (
        len(reader.units) == 40
        and reader.world_size * reader.streams * reader.stream_rows == reader.num_examples
    )
    counts = _counting_reads(monkeypatch)
    seen = [u for rank in range(RANKS) for batch in _epoch(eight_shards, rank, workers) for u in batch]
    assert sorted(seen) == list(range(2304))
    processes = RANKS * max(1, workers)
    assert 40 <= counts[1] <= 40 + processes - 1
    if workers == 0:
        assert int(counts[0]) <= 1.15 * dataset_bytes, int(counts[0]) / dataset_bytes


def test_each_process_fetches_a_record_batch_once(eight_shards, monkeypatch):
    """Workers simulated in one process: each (rank, worker) fetches each record batch at most
    once, the W workers of a rank fetch at most W − 1 more than one process does, and the
    DataLoader's round-robin over them gives the batches of one process."""
    worker = types.SimpleNamespace(id=0, num_workers=1)
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: worker)
    original = ExampleShards._read_unit
    reads: list[tuple[int, int]] = []

    def spy(self, unit):
        reads.append((unit.shard, unit.batch))
        return original(self, unit)

    monkeypatch.setattr(ExampleShards, "_read_unit", spy)
    for rank, start in ((0, 0), (3, 0), (1, 21)):
        reader = ExampleShards(eight_shards, batch_size=BATCH, seed=3, rank=rank, world_size=RANKS, streams=8)
        reader.load_state_dict(reader.state_at(start))
        expected, alone = None, None
        for workers in (1, 2, 4, 8):
            worker.num_workers, per_worker, fetched = workers, [], 0
            for worker.id in range(workers):
                reads.clear()
                per_worker.append([_uids(b) for b in reader])
                assert len(reads) == len(set(reads)), (rank, workers, worker.id)
                fetched += len(reads)
            order = [per_worker[j % workers][j // workers] for j in range(len(reader) - start)]
            expected, alone = expected or order, alone or fetched
            assert order == expected and fetched <= alone + workers - 1, (rank, workers, fetched, alone)
