"""The record-batch index (``schemas.index``)."""

from __future__ import annotations

import hashlib

import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from schemas.commands import InputError
from schemas.examples import examples_format
from schemas.formats import batch_row_counts
from schemas.index import ShardIndex, shard_index_entry

FMT = examples_format(1000)


def _rows(first: int, count: int) -> list[dict]:
    return [
        {
            "input_ids": [2, uid, 7, 3, 9, 3],
            "masked_lm_positions": [2],
            "masked_lm_ids": [8],
            "next_sentence_labels": uid % 2,
            "num_tokens_a": 4,
            "num_tokens": 6,
            "doc_id": f"d{uid}",
            "dupe_index": 0,
        }
        for uid in range(first, first + count)
    ]


def _shard(first: int, count: int) -> bytes:
    """A shard as the writer makes it (record batches of 1,024 rows)."""
    return FMT.to_ipc_bytes(FMT.to_table(_rows(first, count)), "<test>")


def test_index_entries_locate_every_record_batch():
    data = _shard(0, 2500)
    entry, schema = shard_index_entry("train/part-00000-of-00001.arrow", data)
    reader = ipc.open_file(pa.py_buffer(data))
    assert schema.equals(FMT.schema, check_metadata=True)
    assert [b.num_rows for b in entry.batches] == [1024, 1024, 452] and entry.num_rows == 2500
    assert entry.num_bytes == len(data) and entry.sha256 == hashlib.sha256(data).hexdigest()
    for k, b in enumerate(entry.batches):
        piece = data[b.offset : b.offset + b.length]
        assert hashlib.sha256(piece).hexdigest() == b.sha256
        decoded = ipc.read_record_batch(ipc.read_message(pa.py_buffer(piece)), schema)
        assert decoded.equals(reader.get_batch(k))
    with pytest.raises(ValueError, match="x.arrow: not a readable Arrow IPC file"):
        shard_index_entry("x.arrow", data[: len(data) // 2])


def test_index_json_round_trip_and_version():
    entries = tuple(shard_index_entry(f"train/{i}.arrow", _shard(i * 100, 50 + i))[0] for i in range(3))
    index = ShardIndex("examples", 1, FMT.schema, entries)
    text = index.to_json()
    back = ShardIndex.from_json(text, "index.json")
    assert back.shards == index.shards and back.schema.equals(FMT.schema, check_metadata=True)
    assert back.to_json() == text
    with pytest.raises(InputError, match=r"index\.json: index version 2 is not supported"):
        ShardIndex.from_json(text.replace('"index_version":1', '"index_version":2'), "index.json")
    with pytest.raises(InputError, match=r"index\.json: malformed index"):
        ShardIndex.from_json(text.replace('"offset"', '"offsets"'), "index.json")


@pytest.mark.parametrize("count", [0, 1, 1024, 1025, 2500])
def test_known_batch_rows_give_the_decoded_entry(count):
    """A writer's own row counts (``batch_row_counts``) give the entry that decoding the batches
    gives; a count list that does not match the file's batches is an error, not a wrong index."""
    data = _shard(0, count)
    decoded, _ = shard_index_entry("s.arrow", data)
    known, _ = shard_index_entry("s.arrow", data, batch_row_counts(count), hashlib.sha256(data).hexdigest())
    assert known == decoded and decoded.num_rows == count
    with pytest.raises(ValueError, match="s.arrow: .*record batches"):
        shard_index_entry("s.arrow", data, batch_row_counts(count) + [1])
    if count:
        with pytest.raises(ValueError, match="s.arrow: .*record batches"):
            shard_index_entry("s.arrow", data, batch_row_counts(count)[:-1])
