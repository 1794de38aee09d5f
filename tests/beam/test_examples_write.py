"""WriteExampleShards on spilled pieces writes the bytes the in-memory path gives, every shard."""

from __future__ import annotations

import apache_beam as beam

from pipelines.examples.batches import RequestDrawer, plan_batch
from pipelines.examples.spill import spill
from pipelines.examples.write import WriteExampleShards, shard_pieces, shard_table
from schemas import storage
from tests.unit.test_examples_batches import CONFIG, FMT, VOCAB, _documents


def test_spilled_pieces_give_the_shards_of_the_in_memory_path(pipeline, tmp_path):
    finished, _, _ = plan_batch(_documents(10), CONFIG, RequestDrawer({0: 10}), VOCAB)
    pieces = [p for columns, _ in finished for p in shard_pieces(columns, FMT, 4)]
    # as the DoFns spill them: several files, each holding pieces of several shards
    temp = str(tmp_path / "temp")
    refs = spill(temp, pieces[: len(pieces) // 2])
    refs += spill(temp, pieces[len(pieces) // 2 :])
    out = tmp_path / "out"
    _ = (
        pipeline
        | beam.Create(refs[::-1])
        | WriteExampleShards(storage.Folder(out), "examples", 4, FMT, temp)
        | beam.Map(lambda entry: entry["path"])
    )
    pipeline.run().wait_until_finish()
    for shard in range(4):
        expected = FMT.to_ipc_bytes(shard_table([p for s, p in pieces if s == shard], FMT), source="expected")
        assert (out / "examples" / f"part-{shard:05d}-of-00004.arrow").read_bytes() == expected
