"""``pretrain.data.ExampleShards``: order, sharding over ranks and workers, resume, padding, integrity."""

from __future__ import annotations

import hashlib
import io
import uuid

import fsspec
import pyarrow.ipc as ipc
import pytest
import torch

from pretrain.data import ExampleShards, ShardError
from schemas import Manifest, ManifestError, ShardEntry, completed_marker
from schemas.examples import examples_format

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


def _shard_bytes(rows: list[dict]) -> bytes:
    table = FMT.to_table(rows)
    sink = io.BytesIO()
    with ipc.new_file(sink, table.schema, options=ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_table(table, max_chunksize=7)
    return sink.getvalue()


def _write_folder(url: str, *, complete: bool = True) -> str:
    fs, root = fsspec.core.url_to_fs(url)
    fs.makedirs(f"{root}/examples", exist_ok=True)
    entries, uid = [], 0
    for i, count in enumerate(SHARD_ROWS):
        blob = _shard_bytes([_row(uid + k) for k in range(count)])
        uid += count
        path = f"examples/part-{i:05d}-of-{len(SHARD_ROWS):05d}.arrow"
        fs.pipe_file(f"{root}/{path}", blob)
        entries.append(
            ShardEntry(path, "examples", "train", count, len(blob), hashlib.sha256(blob).hexdigest())
        )
    manifest = Manifest("examples", 1, "test", {"vocab_sha256": "0" * 64}, tuple(entries)).to_json()
    fs.pipe_file(f"{root}/manifest.json", manifest.encode())
    if complete:
        fs.pipe_file(f"{root}/COMPLETED", completed_marker(manifest).encode())
    return url


@pytest.fixture
def folder(tmp_path) -> str:
    return _write_folder(str(tmp_path / "ex"))


def _uids(batch: dict) -> list[int]:
    return batch["input_ids"][:, 1].tolist()


def _run(ds: ExampleShards, workers: int = 0) -> list[list[int]]:
    if workers == 0:
        return [_uids(b) for b in ds]
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers)
    return [_uids(b) for b in loader]


@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("drop_last", [True, False])
def test_every_example_once_per_epoch_across_ranks(folder, world_size, drop_last):
    batch_size, total = 4, sum(SHARD_ROWS)
    ranks = [
        _run(ExampleShards(folder, batch_size=batch_size, rank=r, world_size=world_size, drop_last=drop_last))
        for r in range(world_size)
    ]
    ds = ExampleShards(folder, batch_size=batch_size, world_size=world_size, drop_last=drop_last)
    assert all(len(r) == len(ds) == ds.batches_per_epoch for r in ranks)
    seen = [u for batches in ranks for b in batches for u in b]
    assert all(len(b) == batch_size for batches in ranks for b in batches)
    if drop_last:
        assert len(seen) == len(set(seen)) == total - ds.dropped_examples
        assert ds.dropped_examples < batch_size * world_size
    else:
        assert set(seen) == set(range(total))
        assert len(seen) == total + ds.padded_examples
    # interleaving the ranks' batches gives the global sequence, a permutation of the examples
    interleaved = [u for j in range(len(ds)) for r in range(world_size) for u in ranks[r][j]]
    if not drop_last:  # the padding wraps around to the start of the epoch's global sequence
        assert sorted(interleaved[:total]) == list(range(total))
        assert interleaved[total:] == interleaved[: ds.padded_examples]


@pytest.mark.parametrize("rank", [0, 1])
def test_same_batches_for_any_number_of_workers(folder, rank):
    runs = [_run(ExampleShards(folder, batch_size=3, seed=5, rank=rank, world_size=2), w) for w in (0, 1, 2)]
    assert runs[0] == runs[1] == runs[2]
    assert len(runs[0]) == 70 // 3 // 2


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
    state = first.state_dict()
    assert state == {"epoch": 2, "batches_done": 5} and consumed == expected[:5]

    resumed = ExampleShards(folder, batch_size=4, seed=3, rank=1, world_size=2)
    resumed.load_state_dict(state)
    read: list[tuple[int, int]] = []
    original = ExampleShards._read_unit

    def spy(self, unit):
        read.append((unit.shard, unit.batch))
        return original(self, unit)

    monkeypatch.setattr(ExampleShards, "_read_unit", spy)
    assert _run(resumed) == expected[5:]
    assert _run(resumed, workers=2) == expected[5:]
    # the resume point is global example (5 * 2 + 1) * 4 = 44: units ending before it are not read
    order = [resumed.units[i] for i in resumed._epoch_order()]
    ends = torch.tensor([u.num_rows for u in order]).cumsum(0).tolist()
    before = {(u.shard, u.batch) for u, end in zip(order, ends, strict=True) if end <= 44}
    assert before and not before & set(read)


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
    ds = ExampleShards(url, batch_size=7, seed=9)
    assert _run(ds, 2) == _run(ds) and len(_run(ds)) == 10


def test_sha256_mismatch_names_the_file(tmp_path):
    url = _write_folder(str(tmp_path / "ex"))
    shard = tmp_path / "ex/examples/part-00001-of-00003.arrow"
    blob = bytearray(shard.read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    shard.write_bytes(bytes(blob))
    ds = ExampleShards(url, batch_size=4)
    with pytest.raises(ShardError, match=r"part-00001-of-00003\.arrow: SHA-256"):
        list(ds)


def test_truncated_shard_names_the_file(tmp_path):
    url = _write_folder(str(tmp_path / "ex"))
    shard = tmp_path / "ex/examples/part-00002-of-00003.arrow"
    shard.write_bytes(shard.read_bytes()[:-100])
    with pytest.raises(ShardError, match=r"part-00002-of-00003\.arrow: .*truncated"):
        ExampleShards(url, batch_size=4)


def test_missing_completed_is_refused(tmp_path):
    url = _write_folder(str(tmp_path / "ex"), complete=False)
    with pytest.raises(ManifestError, match="COMPLETED"):
        ExampleShards(url, batch_size=4)


def test_row_counts_from_footers_match_pyarrow(folder):
    ds = ExampleShards(folder, batch_size=4)
    with open(f"{folder}/examples/part-00000-of-00003.arrow", "rb") as f:
        reader = ipc.open_file(f)
        sizes = [reader.get_batch(k).num_rows for k in range(reader.num_record_batches)]
    assert [u.num_rows for u in ds.units if u.shard == 0] == sizes == [7, 7, 7, 2]
