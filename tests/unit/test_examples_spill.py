"""Spilled pieces, documents and requests come back exactly as written; folders go away whole."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from pipelines import files
from pipelines.examples.batches import RequestDrawer, plan_batch
from pipelines.examples.spill import (
    documents_from_bytes,
    documents_to_bytes,
    read_spilled,
    requests_from_bytes,
    requests_to_bytes,
    spill,
)
from schemas.commands import InputError
from tests.unit.test_examples_batches import CONFIG, VOCAB, _documents


def test_pieces_come_back_by_reference_from_one_file_per_spill(tmp_path):
    folder = str(tmp_path / "run")
    first = spill(folder, [(2, b"alpha"), (0, b""), (2, b"beta" * 1000)])
    second = spill(folder, [(1, b"gamma")])
    assert spill(folder, []) == []
    assert [key for key, _ in first] == [2, 0, 2] and len({ref[0] for _, ref in first}) == 1
    assert len(list((tmp_path / "run").iterdir())) == 2
    refs = [ref for _, ref in second + first]
    # read file by file in offset order, whatever order the references come in (as tuples or, back
    # from GroupOnDisk's JSON, lists)
    assert sorted(read_spilled(refs, folder)) == sorted([b"alpha", b"", b"beta" * 1000, b"gamma"])
    assert list(read_spilled([list(first[2][1]), first[0][1]], folder)) == [b"alpha", b"beta" * 1000]


@pytest.mark.parametrize("ref", [["../../etc/passwd", 0, 1], ["a" * 32 + ".spill", -1, 1], ["x"], "name"])
def test_a_reference_to_anything_but_a_spilled_piece_is_refused(tmp_path, ref):
    with pytest.raises(InputError, match="is no reference to a file this run spilled"):
        list(read_spilled([ref], str(tmp_path)))


def test_a_truncated_spill_file_is_an_error_naming_it(tmp_path):
    (_, ref), *_ = spill(str(tmp_path), [(0, b"x" * 100)])
    with open(tmp_path / ref[0], "r+b") as f:
        f.truncate(40)
    with pytest.raises(InputError, match=r"\.spill: temporary file ends at 40 bytes, a piece needs 100"):
        list(read_spilled([ref], str(tmp_path)))


def test_documents_round_trip_with_their_dtypes():
    documents = _documents(7)
    back = documents_from_bytes(documents_to_bytes(documents))
    assert [d.doc_id for d in back] == [d.doc_id for d in documents]
    for original, copy in zip(documents, back, strict=True):
        assert copy.tokens.dtype == original.tokens.dtype and copy.offsets.dtype == original.offsets.dtype
        assert np.array_equal(copy.tokens, original.tokens) and np.array_equal(copy.offsets, original.offsets)
    assert documents_from_bytes(documents_to_bytes(documents[:1]))[0].doc_id == documents[0].doc_id


def test_requests_round_trip_field_by_field():
    _, _, requests = plan_batch(_documents(12), CONFIG, RequestDrawer({0: 6, 1: 6}), VOCAB)
    assert requests
    for _, original in requests:
        copy = requests_from_bytes(requests_to_bytes(original))
        assert copy.doc_ids.dtype == object and copy.doc_ids.tolist() == original.doc_ids.tolist()
        for field in original._fields:
            assert np.array_equal(getattr(copy, field), getattr(original, field)), field
            assert getattr(copy, field).dtype == getattr(original, field).dtype, field


def test_remove_tree_deletes_nested_files_and_the_folder(tmp_path):
    folder = tmp_path / "temp"
    spill(str(folder / "examples-1"), [(0, b"a"), (1, b"b")])
    spill(str(folder), [(0, b"c")])
    assert files.remove_tree(str(folder)) == 2
    assert not folder.exists()
    assert files.remove_tree(str(folder)) == 0  # nothing there: nothing to do


def test_auto_spills_on_the_local_runners_only():
    from pipelines.examples.pipeline import spill_folder

    config = dataclasses.replace(CONFIG, output="out")
    assert spill_folder(config, "FnApiRunner") == "out/.temp" == spill_folder(config, "DirectRunner")
    assert spill_folder(config, "DataflowRunner") is None
    assert spill_folder(dataclasses.replace(config, spill="never"), "FnApiRunner") is None
    elsewhere = dataclasses.replace(config, spill="always", temp_location="gs://b/tmp")
    first, second = spill_folder(elsewhere, "DataflowRunner"), spill_folder(elsewhere, "DataflowRunner")
    assert first.startswith("gs://b/tmp/examples-") and first != second  # one folder per run
    with pytest.raises(ValueError, match="--spill takes auto, always, never, got sometimes"):
        dataclasses.replace(config, spill="sometimes")
    with pytest.raises(ValueError, match="--spill never writes none"):
        dataclasses.replace(config, spill="never", temp_location="/tmp/x")


def test_planning_a_batch_in_parts_changes_no_example(monkeypatch):
    import pipelines.examples.dofns as dofns
    from tests.unit.test_examples_batches import _rows

    documents = _documents(30)
    drawer = RequestDrawer({0: 15, 1: 15})
    monkeypatch.setattr(dofns, "PLAN_SENTENCE_PASSES", 60)
    parts = list(dofns.plan_parts(documents, CONFIG.dupe_factor))
    assert len(parts) > 3 and [d for part in parts for d in part] == documents
    assert all(len(p) == 1 or sum(d.num_sentences for d in p) * 3 <= 60 for p in parts)
    whole, _, whole_requests = plan_batch(documents, CONFIG, drawer, VOCAB)
    finished, requests = [], []
    for part in parts:
        part_finished, _, part_requests = plan_batch(part, CONFIG, drawer, VOCAB)
        finished += part_finished
        requests += part_requests

    def keys(reqs):
        return sorted(k for _, r in reqs for k in r.keys.tolist())

    assert _rows(finished) == _rows(whole) and keys(requests) == keys(whole_requests)
