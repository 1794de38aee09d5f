"""The on-disk contracts: record formats round-trip, and bad data is refused with a named file."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

from schemas import DOCUMENTS, REJECTS, Manifest, ShardEntry, completed_marker
from schemas.commands import InputError


def _doc(**overrides):
    row = {
        "doc_id": "0" * 32,
        "source": "books",
        "origin": "b.txt",
        "title": None,
        "page_id": None,
        "revision_id": None,
        "sentences": ["One.", "Two."],
        "num_sentences": 2,
        "num_words": 2,
        "num_chars": 8,
    }
    row.update(overrides)
    return row


def test_documents_round_trip_is_byte_stable():
    table = DOCUMENTS.to_table([_doc(), _doc(doc_id="f" * 32, page_id=7, title="T")])
    data = DOCUMENTS.to_ipc_bytes(table, "x.arrow")
    assert data == DOCUMENTS.to_ipc_bytes(DOCUMENTS.to_table(table.to_pylist()), "x.arrow")
    back = DOCUMENTS.read_ipc(data, "x.arrow")
    assert back.to_pylist() == table.to_pylist()
    assert back.schema.metadata[b"format"] == b"documents"


@pytest.mark.parametrize(
    "row, message",
    [
        (_doc(doc_id="XYZ"), "doc_id"),
        (_doc(num_sentences=3), "num_sentences"),
        (_doc(sentences=[], num_sentences=0), "no sentences"),
        (_doc(source=None), "source"),
    ],
)
def test_invalid_documents_are_refused_naming_the_file(row, message):
    with pytest.raises(InputError, match=rf"shard-7\.arrow.*{message}"):
        DOCUMENTS.to_table([row], source="shard-7.arrow")


def test_reading_another_format_or_version_names_the_file():
    data = REJECTS.to_ipc_bytes(REJECTS.to_table([]), "r.arrow")
    with pytest.raises(InputError, match="r.arrow: expected a 'documents' file, found format 'rejects'"):
        DOCUMENTS.read_ipc(data, "r.arrow")
    newer = dataclasses.replace(DOCUMENTS, version=99)
    data = newer.to_ipc_bytes(newer.to_table([_doc()]), "n.arrow")
    with pytest.raises(InputError, match="version 99 is not supported"):
        DOCUMENTS.read_ipc(data, "n.arrow")
    with pytest.raises(InputError, match="not a readable Arrow IPC file"):
        DOCUMENTS.read_ipc(b"not arrow at all", "junk.arrow")


def test_a_table_with_other_columns_is_refused():
    table = pa.table(
        {"doc_id": ["0" * 32]},
        schema=pa.schema(
            [("doc_id", pa.string())], metadata={b"format": b"documents", b"format_version": b"1"}
        ),
    )
    with pytest.raises(InputError, match="columns do not match"):
        DOCUMENTS.validate(table, "odd.arrow")


def test_manifest_round_trip_and_marker():
    entry = ShardEntry("train/part-00000-of-00001.arrow", "documents", "train", 3, 100, "ab" * 32)
    manifest = Manifest("documents", 1, "pipelines corpus", {"seed": 1}, (entry,))
    text = manifest.to_json()
    assert Manifest.from_json(text, "m.json") == manifest
    assert manifest.num_rows("train") == 3 and manifest.splits() == ["train"]
    assert completed_marker(text) == completed_marker(text) != completed_marker(text + " ")


@pytest.mark.parametrize(
    "text, message",
    [
        ("{", "not valid JSON"),
        ('{"manifest_version": 7}', "manifest version 7"),
        ('{"manifest_version": 1, "format": "documents"}', "malformed manifest"),
    ],
)
def test_bad_manifests_are_refused(text, message):
    with pytest.raises(InputError, match=message):
        Manifest.from_json(text, "m.json")
