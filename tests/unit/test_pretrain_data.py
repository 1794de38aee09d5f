"""``pretrain.data.ExampleShards``: order, sharding over ranks and workers, resume, padding, integrity."""

from __future__ import annotations

import functools
import hashlib
import io
import os
import random
import re
import signal
import time
import types
import uuid

import fsspec
import numpy as np
import pyarrow.ipc as ipc
import pytest
import torch

from pretrain.collate import DynamicMasking, collate
from pretrain.data import ExampleShards, ShardLoader
from pretrain.streams import segment_positions
from pretrain.train import is_worker_failure, worker_failure
from schemas import Manifest, ShardEntry, completed_marker
from schemas.commands import InputError
from schemas.examples import examples_format
from schemas.index import INDEX_FILE, ShardIndex, index_reference, shard_index_entry
from wordpiece.masking import MaskingConfig

FMT = examples_format(1000)
SHARD_ROWS = (23, 17, 30)  # 70 examples, record batches of at most 7 rows


def _row(uid: int) -> dict:
    n_a = 2 + uid % 4
    n = n_a + 2 + uid % 9
    ids = [2] + [100 + uid % 800] * (n - 2) + [3]
    ids[1] = uid  # the example's identity, recoverable from any batch
    positions = [p for p in (2, 4, 6) if p < n - 1][: 1 + uid % 3]
    return {
        "input_ids": ids,
        "masked_lm_positions": positions,
        "masked_lm_ids": [500 + p for p in positions],
        "next_sentence_labels": uid % 2,
        "num_tokens_a": n_a,
        "num_tokens": n,
        "doc_id": f"d{uid}",
        "dupe_index": 0,
    }


def _shard_bytes(rows: list[dict], batch_rows: int = 7) -> bytes:
    table = FMT.to_table(rows)
    sink = io.BytesIO()
    with ipc.new_file(sink, table.schema, options=ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_table(table, max_chunksize=batch_rows)
    return sink.getvalue()


def _write_folder(
    url: str,
    *,
    complete: bool = True,
    with_index: bool = True,
    shard_rows: tuple[int, ...] = SHARD_ROWS,
    batch_rows: int = 7,
) -> str:
    """An examples output as ``pipelines examples`` writes it (``with_index=False``: a manifest that
    names no record-batch index)."""
    fs, root = fsspec.core.url_to_fs(url)
    fs.makedirs(f"{root}/examples", exist_ok=True)
    entries, indexed, uid = [], [], 0
    for i, count in enumerate(shard_rows):
        blob = _shard_bytes([_row(uid + k) for k in range(count)], batch_rows)
        uid += count
        path = f"examples/part-{i:05d}-of-{len(shard_rows):05d}.arrow"
        fs.pipe_file(f"{root}/{path}", blob)
        entries.append(
            ShardEntry(path, "examples", "train", count, len(blob), hashlib.sha256(blob).hexdigest())
        )
        indexed.append(shard_index_entry(path, blob)[0])
    reference = None
    if with_index:
        index_json = ShardIndex("examples", 1, FMT.schema, tuple(indexed)).to_json()
        fs.pipe_file(f"{root}/{INDEX_FILE}", index_json.encode())
        reference = index_reference(index_json)
    manifest = Manifest(
        "examples", 1, "test", {"vocab_sha256": "0" * 64}, tuple(entries), index=reference
    ).to_json()
    fs.pipe_file(f"{root}/manifest.json", manifest.encode())
    if complete:
        fs.pipe_file(f"{root}/COMPLETED", completed_marker(manifest).encode())
    return url


@pytest.fixture
def folder(tmp_path) -> str:
    return _write_folder(str(tmp_path / "ex"))


def _uids(batch: dict) -> list[int]:
    """Each row's example (token 1; its label when dynamic masking replaced it)."""
    labels = batch["labels"][:, 1]
    return torch.where(labels == -100, batch["input_ids"][:, 1], labels).tolist()


def _run(ds: ExampleShards, workers: int = 0) -> list[list[int]]:
    if workers == 0:
        return [_uids(b) for b in ds]
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
    return [_uids(b) for b in loader]


def _global_sequence(ds: ExampleShards) -> list[int]:
    """The epoch's global example sequence, rebuilt from the units the way the reader orders them."""
    sequence = []
    for i in ds._epoch_order():
        unit = ds.units[i]
        table = ds._read_unit(unit)
        sequence += [ids[1] for ids in table.column("input_ids").to_pylist()]
    return sequence


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("drop_last", [True, False])
@pytest.mark.parametrize("streams", [None, 2, 4])
def test_every_example_once_per_epoch_across_ranks(folder, world_size, drop_last, streams):
    batch_size, total = 4, sum(SHARD_ROWS)
    make = functools.partial(
        ExampleShards,
        folder,
        batch_size=batch_size,
        world_size=world_size,
        drop_last=drop_last,
        streams=streams,
    )
    ranks = [_run(make(rank=r)) for r in range(world_size)]
    ds = make()
    assert all(len(r) == len(ds) == ds.batches_per_epoch for r in ranks)
    seen = [u for batches in ranks for b in batches for u in b]
    assert all(len(b) == batch_size for batches in ranks for b in batches)
    if drop_last:
        assert len(seen) == len(set(seen)) == ds.world_size * ds.streams * ds.stream_rows
        assert total - ds.world_size * ds.streams * ds.stream_rows < batch_size * world_size * ds.streams
    else:
        assert set(seen) == set(range(total))
        assert len(seen) == ds.world_size * ds.streams * ds.stream_rows
    # stream v of rank r: its batches j with j % streams == v; it reads segment
    # r * streams + segment_positions(streams)[v] of the epoch's global sequence, so the segments,
    # concatenated, are that sequence (wrapping around to its start when padded)
    segments: dict[int, list[int]] = {}
    for r, batches in enumerate(ranks):
        for v, position in enumerate(segment_positions(ds.streams)):
            stream = [u for j, b in enumerate(batches) if j % ds.streams == v for u in b]
            segments[r * ds.streams + position] = stream
    sequence = _global_sequence(ds)
    assert sorted(sequence) == list(range(total))
    assert [u for g in sorted(segments) for u in segments[g]] == (sequence + sequence)[: len(seen)]


@pytest.mark.parametrize("rank", [0, 1])
def test_same_batches_for_any_number_of_workers(folder, rank):
    runs = [
        _run(ExampleShards(folder, batch_size=3, seed=5, rank=rank, world_size=2, streams=2), w)
        for w in (0, 1, 2)
    ]
    assert runs[0] == runs[1] == runs[2]
    assert len(runs[0]) == 2 * (70 // (2 * 2 * 3))


def test_workers_read_disjoint_units(folder, monkeypatch):
    """Each worker reads only the units of its streams (here one each): a unit is read twice only
    where it straddles the segments of two workers' streams."""
    ds = ExampleShards(folder, batch_size=2, seed=4, streams=4)
    single = _run(ds)
    read: dict[int, list[tuple[int, int]]] = {}
    original = ExampleShards._read_unit
    worker = types.SimpleNamespace(id=0, num_workers=4)
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: worker)

    def spy(self, unit):
        read.setdefault(worker.id, []).append((unit.shard, unit.batch))
        return original(self, unit)

    monkeypatch.setattr(ExampleShards, "_read_unit", spy)
    per_worker = []
    for w in range(4):
        worker.id = w
        per_worker.append(_run(ds))
    # the DataLoader's round-robin over the workers gives the single-process order
    assert [per_worker[j % 4][j // 4] for j in range(len(single))] == single
    counts: dict[tuple[int, int], int] = {}
    for units in read.values():
        assert len(units) == len(set(units))
        for unit in units:
            counts[unit] = counts.get(unit, 0) + 1
    assert sum(n - 1 for n in counts.values()) <= 4 - 1  # at most one shared unit per stream boundary
    with pytest.raises(ValueError, match="3 DataLoader workers do not divide 4 streams"):
        worker.id, worker.num_workers = 0, 3
        _run(ds)


def test_epochs_differ_and_seed_repeats(folder):
    def epoch_order(seed: int, epoch: int) -> list[list[int]]:
        ds = ExampleShards(folder, batch_size=5, seed=seed)
        ds.set_epoch(epoch)
        return _run(ds)

    assert epoch_order(1, 0) == epoch_order(1, 0)
    assert epoch_order(1, 0) != epoch_order(1, 1)
    assert epoch_order(1, 0) != epoch_order(2, 0)
    unshuffled = ExampleShards(folder, batch_size=5, shuffle=False)
    assert [u for b in _run(unshuffled) for u in b] == list(range(70))


def test_resume_skips_consumed_batches_without_reading_them(folder, monkeypatch):
    full = ExampleShards(folder, batch_size=4, seed=3, rank=1, world_size=2)
    full.set_epoch(2)
    expected = _run(full)
    first = ExampleShards(folder, batch_size=4, seed=3, rank=1, world_size=2)
    first.set_epoch(2)
    it = iter(first)
    consumed = [_uids(next(it)) for _ in range(5)]
    state = first.state_at(first.batches_done)
    assert state["epoch"] == 2 and state["batches_done"] == 5 and consumed == expected[:5]

    resumed = ExampleShards(folder, batch_size=4, seed=3, rank=1, world_size=2)
    resumed.load_state_dict(state)
    read: list[tuple[int, int]] = []
    original = ExampleShards._read_unit

    def spy(self, unit):
        if self is resumed:  # not the prefetch thread of `first`, which may still be reading ahead
            read.append((unit.shard, unit.batch))
        return original(self, unit)

    monkeypatch.setattr(ExampleShards, "_read_unit", spy)
    assert _run(resumed) == expected[5:]
    # one stream per rank of L = 32 examples: rank 1 owns global examples [32, 64) and resumes
    # at 32 + 5 * 4 = 52, so exactly the units overlapping [52, 64) are read
    assert resumed.streams == 1 and resumed.stream_rows == 32
    order = [resumed.units[i] for i in resumed._epoch_order()]
    ends = torch.tensor([u.num_rows for u in order]).cumsum(0).tolist()
    starts = [end - u.num_rows for u, end in zip(order, ends, strict=True)]
    needed = [
        (u.shard, u.batch) for u, lo, hi in zip(order, starts, ends, strict=True) if hi > 52 and lo < 64
    ]
    assert read == needed


def test_resume_state_from_other_settings_is_refused(folder):
    state = ExampleShards(folder, batch_size=4, world_size=2).state_at(3)
    with pytest.raises(ValueError, match="saved with world_size=2, this run has 1"):
        ExampleShards(folder, batch_size=4).load_state_dict(state)
    for key, value in (("batches_done", 10**6), ("epoch", -1), ("epoch", "2")):
        with pytest.raises(ValueError, match="is not one of these shards"):
            ExampleShards(folder, batch_size=4, world_size=2).load_state_dict(state | {key: value})


def test_padding_and_token_types(folder):
    ds = ExampleShards(folder, batch_size=6, shuffle=False)
    for batch in ds:
        size, width = batch["input_ids"].shape
        assert width % 8 == 0 and width - 8 < batch["attention_mask"].sum(1).max() <= width
        for i, uid in enumerate(_uids(batch)):
            row = _row(uid)
            n, n_a, m = row["num_tokens"], row["num_tokens_a"], len(row["masked_lm_positions"])
            assert batch["input_ids"][i, :n].tolist() == row["input_ids"]
            assert batch["input_ids"][i, n:].eq(0).all()
            assert batch["attention_mask"][i].tolist() == [1] * n + [0] * (width - n)
            assert batch["token_type_ids"][i].tolist() == [0] * n_a + [1] * (n - n_a) + [0] * (width - n)
            assert batch["masked_lm_positions"][i, :m].tolist() == row["masked_lm_positions"]
            assert batch["masked_lm_ids"][i, :m].tolist() == row["masked_lm_ids"]
            assert batch["masked_lm_weights"][i].tolist() == [1.0] * m + [0.0] * (
                batch["masked_lm_ids"].shape[1] - m
            )
            labels = batch["labels"][i]
            assert labels[row["masked_lm_positions"]].tolist() == row["masked_lm_ids"]
            assert (labels != -100).sum() == m
            assert batch["next_sentence_labels"][i] == row["next_sentence_labels"]
        assert batch["input_ids"].dtype == batch["labels"].dtype == torch.int64


def test_memory_filesystem_with_workers():
    url = _write_folder(f"memory://ex-{uuid.uuid4().hex}")
    ds = ExampleShards(url, batch_size=7, seed=9, streams=2)
    assert _run(ds, 2) == _run(ds) and len(_run(ds)) == 10


def _tamper(shard, at: int) -> None:
    blob = bytearray(shard.read_bytes())
    blob[at] ^= 0xFF
    shard.write_bytes(bytes(blob))


def test_tampered_record_batch_names_shard_and_batch(tmp_path):
    url = _write_folder(str(tmp_path / "ex"))
    ds = ExampleShards(url, batch_size=4)
    unit = next(u for u in ds.units if u.shard == 1 and u.batch == 2)
    _tamper(tmp_path / "ex/examples/part-00001-of-00003.arrow", unit.offset + unit.length // 2)
    with pytest.raises(InputError) as caught:
        list(ds)
    assert str(caught.value) == (
        f"{tmp_path}/ex/examples/part-00001-of-00003.arrow: record batch 2 (bytes {unit.offset}-"
        f"{unit.offset + unit.length}) differs from its SHA-256 in index.json; the shard was modified or "
        "damaged: restore it or regenerate the output with `pipelines examples`"
    )


def test_truncated_shard_names_the_file_and_batch(tmp_path):
    url = _write_folder(str(tmp_path / "ex"))
    ds = ExampleShards(url, batch_size=4)
    shard = tmp_path / "ex/examples/part-00002-of-00003.arrow"
    shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    with pytest.raises(InputError, match=r"part-00002-of-00003\.arrow: record batch \d \(bytes"):
        list(ds)


def test_shards_without_an_index_are_refused_saying_to_rebuild_them(tmp_path):
    url = _write_folder(str(tmp_path / "ex"), with_index=False)
    with pytest.raises(InputError) as caught:
        ExampleShards(url, batch_size=4)
    message = str(caught.value)
    assert "\n" not in message and message.endswith("rebuild the shards with `pipelines examples`")


def test_a_modified_or_missing_index_is_refused_saying_how_to_rebuild(tmp_path):
    url = _write_folder(str(tmp_path / "ex"))
    index = tmp_path / "ex/index.json"
    index.write_text(index.read_text().replace('"num_rows":[7,', '"num_rows":[6,', 1))
    with pytest.raises(InputError) as caught:
        ExampleShards(url, batch_size=4)
    assert str(caught.value) == (
        f"{index}: differs from the SHA-256 in the manifest; rebuild the shards with `pipelines examples ... "
        f"--output {url} --overwrite` (the params of manifest.json record the settings they were made with)"
    )
    index.unlink()
    with pytest.raises(InputError, match=r"index\.json: missing; rebuild the shards with"):
        ExampleShards(url, batch_size=4)


def _counting(monkeypatch, cls) -> dict[str, int]:
    """Count the calls of ``cls``'s file-access methods (each one a request on a bucket)."""
    calls: dict[str, int] = {}
    for name in ("cat_file", "cat", "cat_ranges", "_open", "open", "info", "size", "exists", "ls", "find"):
        original = getattr(cls, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            calls[_name] = calls.get(_name, 0) + 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, counted)
    return calls


def test_building_the_reader_takes_the_same_requests_for_any_number_of_shards(monkeypatch):
    from fsspec.implementations.memory import MemoryFileSystem

    few = _write_folder(f"memory://few-{uuid.uuid4().hex}", shard_rows=(30, 40))
    many = _write_folder(f"memory://many-{uuid.uuid4().hex}", shard_rows=(7,) * 10)
    counts = []
    for url in (few, many):
        calls = _counting(monkeypatch, MemoryFileSystem)
        ExampleShards(url, batch_size=4)
        counts.append(calls)
        monkeypatch.undo()
    assert counts[0] == counts[1] == {"cat_file": 3}  # manifest.json, COMPLETED, index.json
    # reading a unit is one ranged request
    ds = ExampleShards(many, batch_size=7, shuffle=False)
    calls = _counting(monkeypatch, MemoryFileSystem)
    assert sum(len(b) for b in _run(ds)) == 70 and calls == {"cat_file": 10}


def test_missing_completed_is_refused(tmp_path):
    url = _write_folder(str(tmp_path / "ex"), complete=False)
    with pytest.raises(InputError, match="COMPLETED"):
        ExampleShards(url, batch_size=4)


def test_row_counts_from_the_index_match_pyarrow(folder):
    ds = ExampleShards(folder, batch_size=4)
    with open(f"{folder}/examples/part-00000-of-00003.arrow", "rb") as f:
        reader = ipc.open_file(f)
        sizes = [reader.get_batch(k).num_rows for k in range(reader.num_record_batches)]
    assert [u.num_rows for u in ds.units if u.shard == 0] == sizes == [7, 7, 7, 2]


VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]"] + [f"w{i}" for i in range(994)]


def _original_ids(uid: int) -> list[int]:
    """The unmasked tokens of :func:`_row` (its masked_lm_ids are what the masks replaced)."""
    row = _row(uid)
    ids = list(row["input_ids"])
    for p, token in zip(row["masked_lm_positions"], row["masked_lm_ids"], strict=True):
        ids[p] = token
    return ids


def test_dynamic_masking_restores_then_masks_afresh(folder):
    masking = DynamicMasking.from_vocab(VOCAB, MaskingConfig(masked_lm_prob=0.3, max_predictions_per_seq=3))
    assert (
        masking.vocab.mask_id == 4 and masking.vocab.special[2] and 5 not in masking.vocab.random_ids.tolist()
    )
    ds = ExampleShards(folder, batch_size=5, seed=2, masking=masking, streams=2)
    epoch0 = list(ds)
    for batch in epoch0:
        for i, uid in enumerate(_uids(batch)):
            original, n = _original_ids(uid), _row(uid)["num_tokens"]
            weights = batch["masked_lm_weights"][i]
            m = int(weights.sum())
            assert m == min(3, max(1, round(n * 0.3)), n - 2)
            positions = batch["masked_lm_positions"][i, :m].tolist()
            assert positions == sorted(set(positions)) and all(0 < p < n and p != n - 1 for p in positions)
            assert batch["masked_lm_ids"][i, :m].tolist() == [original[p] for p in positions]
            labels = batch["labels"][i]
            assert (labels != -100).sum() == m and labels[positions].tolist() == [
                original[p] for p in positions
            ]
            unmasked = [p for p in range(n) if p not in positions]
            assert batch["input_ids"][i, unmasked].tolist() == [original[p] for p in unmasked]
    # the same masks for any number of workers; new ones the next epoch
    assert [b["input_ids"].tolist() for b in _iter_loader(ds, 2)] == [b["input_ids"].tolist() for b in epoch0]
    ds.set_epoch(1)

    def masks(batches):
        return {
            uid: tuple(b["masked_lm_positions"][i].tolist())
            for b in batches
            for i, uid in enumerate(_uids(b))
        }

    first, second = masks(epoch0), masks(list(ds))
    common = first.keys() & second.keys()
    assert len(common) > 20 and sum(first[u] != second[u] for u in common) > len(common) // 3


def _iter_loader(ds, workers):
    return list(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers))


def test_dynamic_masking_80_10_10():
    """38,000 choices: each share within 0.01 (more than 4 standard deviations)."""
    rng = random.Random(0)
    rows = []
    for uid in range(2000):
        ids = [2] + [6 + rng.randrange(994) for _ in range(126)] + [3]
        rows.append(
            {
                "input_ids": ids,
                "masked_lm_positions": [],
                "masked_lm_ids": [],
                "next_sentence_labels": 0,
                "num_tokens_a": 60,
                "num_tokens": 128,
                "doc_id": str(uid),
                "dupe_index": 0,
            }
        )
    table = FMT.to_table(rows)
    masking = DynamicMasking.from_vocab(VOCAB)
    batch = collate(table, masking, np.random.default_rng(7))
    weights = batch["masked_lm_weights"].bool()
    assert weights.sum(1).eq(19).all()  # round(128 * 0.15) = 19
    positions, originals = batch["masked_lm_positions"][weights], batch["masked_lm_ids"][weights]
    rows_of = weights.nonzero()[:, 0]
    now = batch["input_ids"][rows_of, positions]
    masked = (now == 4).float().mean().item()
    same = (now == originals).float().mean().item()
    assert abs(masked - 0.8) < 0.01 and abs(same - 0.1) < 0.01
    assert now[(now != 4) & (now != originals)].ge(6).all()  # random tokens are real tokens
    with pytest.raises(ValueError, match="seeded generator"):
        collate(table, masking)


def test_vocabulary_must_match_the_manifest(folder):
    ExampleShards(folder, batch_size=4, vocab_sha256="0" * 64)
    with pytest.raises(InputError, match=r"manifest\.json: the shards were written with the vocabulary"):
        ExampleShards(folder, batch_size=4, vocab_sha256="1" * 64)


def test_folder_without_manifest_is_refused(tmp_path):
    with pytest.raises(InputError, match="no manifest.json"):
        ExampleShards(str(tmp_path), batch_size=4)


def test_too_few_examples_for_the_streams(folder):
    with pytest.raises(InputError, match="70 examples are too few for 2 rank"):
        ExampleShards(folder, batch_size=8, world_size=2, streams=8)


def test_dynamic_masking_of_short_rows_beside_long_ones():
    """A short row's few masks are chosen among its own tokens even when a long row wants 20."""
    rows = [
        {
            "input_ids": [2] + [6 + (k * 7 + n) % 900 for k in range(n - 2)] + [3],
            "masked_lm_positions": [],
            "masked_lm_ids": [],
            "next_sentence_labels": 0,
            "num_tokens_a": 1,
            "num_tokens": n,
            "doc_id": str(n),
            "dupe_index": 0,
        }
        for n in [128, 5, 6, 9, 128, 3]
    ]
    table = FMT.to_table(rows)
    for seed in range(30):
        batch = collate(table, DynamicMasking.from_vocab(VOCAB), np.random.default_rng(seed))
        counts = batch["masked_lm_weights"].sum(1).long().tolist()
        assert counts == [19, 1, 1, 1, 19, 1]
        for i, n in enumerate([128, 5, 6, 9, 128, 3]):
            positions = batch["masked_lm_positions"][i, : counts[i]]
            assert positions.gt(0).all() and positions.lt(n - 1).all()


def test_transient_read_errors_are_retried_without_changing_the_data(folder, monkeypatch):
    expected = _run(ExampleShards(folder, batch_size=5, seed=3))
    monkeypatch.setattr("pretrain.data.time.sleep", lambda s: None)
    failures = {"left": 4}
    original = fsspec.implementations.local.LocalFileSystem.cat_file

    def flaky(self, path, start=None, end=None, **kwargs):
        if failures["left"] > 0:
            failures["left"] -= 1
            raise ConnectionResetError("connection reset by peer")
        return original(self, path, start=start, end=end, **kwargs)

    ds = ExampleShards(folder, batch_size=5, seed=3)
    monkeypatch.setattr(fsspec.implementations.local.LocalFileSystem, "cat_file", flaky)
    assert _run(ds) == expected and failures["left"] == 0
    failures["left"] = 2  # the manifest, marker and index reads are retried too
    assert _run(ExampleShards(folder, batch_size=5, seed=3, retries=2)) == expected
    failures["left"] = 100
    with pytest.raises(InputError, match=r"manifest\.json: unreadable after 3 attempts"):
        ExampleShards(folder, batch_size=5, seed=3, retries=2)
    failures["left"] = 0
    ds = ExampleShards(folder, batch_size=5, seed=3, retries=2)
    failures["left"] = 100
    with pytest.raises(InputError, match=r"record batch \d+\): unreadable after 3 attempts"):
        _run(ds)


def _epoch_uids(loader: ShardLoader, epoch: int, batches_done: int = 0) -> list[list[int]]:
    return [_uids(b) for b in loader.epoch(epoch, batches_done)]


def test_workers_follow_the_epoch_and_resume_exactly(folder):
    def make():
        return ExampleShards(folder, batch_size=3, seed=5, streams=2)

    expected = {e: _epoch_uids(ShardLoader(make(), 0), e) for e in (0, 1, 2)}
    assert expected[0] != expected[1] != expected[2]
    loader = ShardLoader(make(), 2)
    assert _epoch_uids(loader, 0) == expected[0]
    assert _epoch_uids(loader, 1) == expected[1]
    assert _epoch_uids(loader, 2, 5) == expected[2][5:]  # a resume point
    abandoned = loader.epoch(0)
    assert [_uids(next(abandoned)) for _ in range(3)] == expected[0][:3]
    assert _epoch_uids(loader, 1, 3) == expected[1][3:]  # a new epoch while one was under way
    saved = make().state_at(4, 2)  # a resumed run: new reader and loader
    assert _epoch_uids(ShardLoader(make(), 2), saved["epoch"], saved["batches_done"]) == expected[2][4:]


def test_a_shard_error_in_a_worker_is_the_one_line_error_every_time(tmp_path):
    url = _write_folder(str(tmp_path / "ex"))
    ds = ExampleShards(url, batch_size=3, seed=5, streams=2)
    unit = ds.units[5]
    _tamper(tmp_path / "ex/examples" / f"part-{unit.shard:05d}-of-00003.arrow", unit.offset + 40)
    with pytest.raises(InputError) as direct:
        _epoch_uids(ShardLoader(ds, 0), 0)
    assert "\n" not in str(direct.value) and f"record batch {unit.batch} (bytes" in str(direct.value)
    started = time.monotonic()
    loader = ShardLoader(ds, 2)
    for _ in range(12):
        with pytest.raises(InputError) as caught:
            _epoch_uids(loader, 0)
        assert str(caught.value) == str(direct.value)
    assert time.monotonic() - started < 20


@pytest.mark.slow
def test_a_dead_or_stuck_worker_stops_the_run_with_a_message(folder, monkeypatch):
    original = ExampleShards._read_unit
    ds = ExampleShards(folder, batch_size=3, seed=5, streams=2)

    def dies(self, unit):
        if torch.utils.data.get_worker_info() is not None and unit == self.units[3]:
            os.kill(os.getpid(), signal.SIGKILL)
        return original(self, unit)

    monkeypatch.setattr(ExampleShards, "_read_unit", dies)
    # torch reports a dead worker from its SIGCHLD handler, at any point of the consuming loop:
    # the trainer turns that report into one line
    with pytest.raises((RuntimeError, ConnectionError)) as caught:
        _epoch_uids(ShardLoader(ds, 2), 0)
    assert is_worker_failure(caught.value)
    line = worker_failure(folder, caught.value)
    assert re.fullmatch(
        r".*: (DataLoader worker \(pid|\[Errno 104\]).*a DataLoader worker died or sent .*", line
    )

    def hangs(self, unit):
        if unit == self.units[3]:
            time.sleep(30)
        return original(self, unit)

    monkeypatch.setattr(ExampleShards, "_read_unit", hangs)
    started = time.monotonic()
    for workers in (0, 2):  # the reader's own wait, or torch's for a worker that sends nothing
        with pytest.raises(
            (InputError, RuntimeError), match=r"no data for 1 s|DataLoader timed out"
        ) as caught:
            _epoch_uids(ShardLoader(ds, workers, timeout_s=1.0), 0)
        assert isinstance(caught.value, InputError) or is_worker_failure(caught.value)
    assert time.monotonic() - started < 15


def test_an_iterator_left_early_stops_its_reading_thread(folder):
    """Evaluation breaks off after --eval-batches: the reading thread must be gone when the
    iterator is, or the interpreter's exit can abort inside Arrow (exit 134)."""
    import threading

    ds = ExampleShards(folder, batch_size=2, seed=0, prefetch=1)
    before = set(threading.enumerate())
    batches = iter(ds)
    next(batches)
    assert set(threading.enumerate()) - before  # reading ahead
    batches.close()
    assert not set(threading.enumerate()) - before
