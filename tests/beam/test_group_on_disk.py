"""GroupOnDisk: on a local runner, sorted runs on disk merged per partition give what a GroupByKey
gives (values in order, every key once), in rounds past the runs read at once, and leave no file."""

from __future__ import annotations

import json

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from pipelines import shuffle
from pipelines.shuffle import GroupOnDisk, _read_run
from schemas import storage
from schemas.commands import InputError

PAIRS = [(f"k{i % 7}", [i % 5, f"v{i}"]) for i in range(300)]
EXPECTED = [
    (f"k{k}", sorted(([i % 5, f"v{i}"] for i in range(300) if i % 7 == k), key=lambda v: (v[0], v[1])))
    for k in range(7)
]


def _grouped(pipeline, output: str, pairs=PAIRS, **kwargs):
    return (
        pipeline
        | beam.Create(pairs)
        | GroupOnDisk(lambda key, values: [(key, list(values))], storage.Folder(output), **kwargs)
    )


@pytest.mark.parametrize("on_disk", [True, False])
def test_values_reach_reduce_in_order_on_disk_in_merge_rounds_and_in_memory(
    pipeline, tmp_path, monkeypatch, on_disk
):
    monkeypatch.setattr(shuffle, "SPILL_BYTES", 1000)  # a run every few pairs: dozens of runs a partition
    monkeypatch.setattr(shuffle, "MAX_RUNS_MERGED", 3)  # merged in rounds
    if not on_disk:  # what a remote runner gets: a GroupByKey
        monkeypatch.setattr(shuffle, "runs_locally", lambda pipeline: False)
    assert_that(_grouped(pipeline, str(tmp_path), order=lambda v: (v[0], v[1])), equal_to(EXPECTED))
    pipeline.run().wait_until_finish()
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # every run deleted once merged


def test_with_keys_every_key_is_reduced_even_without_values(pipeline, tmp_path):
    found = _grouped(pipeline, str(tmp_path), pairs=[(1, "a"), (3, "b"), (1, "c")], order=lambda v: v, keys=4)
    assert_that(found, equal_to([(0, []), (1, ["a", "c"]), (2, []), (3, ["b"])]))
    pipeline.run().wait_until_finish()


def test_a_run_changed_on_disk_is_one_error_naming_it(tmp_path):
    run = tmp_path / "run.jsonl"
    run.write_text(json.dumps(["key", 1]) + "\n{not json\n")
    with pytest.raises(InputError, match="run.jsonl: not a temporary file this run wrote"):
        list(_read_run(str(run)))


def test_many_small_pairs_spill_as_early_as_a_few_large_ones(tmp_path, monkeypatch):
    """What a bundle holds counts each pair's Python objects, not only its JSON: tiny pairs (a band
    key and a document id) would otherwise be held by the million before the first run is written."""
    monkeypatch.setattr(shuffle, "SPILL_BYTES", 10 * shuffle.ENTRY_BYTES)
    write = shuffle._WriteRuns(str(tmp_path), None, lambda value: value)
    write.start_bundle()
    runs = [run for i in range(100) for run in write.process((i, 0))]  # 5 bytes of JSON each
    assert runs and len(write._held) < 10
    pairs = sorted(list(pair) for _, path in runs for pair in _read_run(path))
    assert pairs == sorted([i, 0] for i in range(100 - len(write._held)))
