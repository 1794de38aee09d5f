"""`pipelines documents`' transform (ReadDocuments) on a handful of files, with TestPipeline."""

from __future__ import annotations

import gzip
import json

import apache_beam as beam
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.testing.util import assert_that, equal_to

from pipelines.config import DocumentsConfig
from pipelines.documents.pipeline import ReadDocuments

PROSE = "The lamp burned low while the keeper wrote his log. The sea was calm that night."


def _outcomes(outcomes):
    return outcomes | beam.Map(lambda o: (o.kind, o.reason, (o.row or {}).get("title")))


def test_rows_become_documents_rejects_and_file_errors(pipeline, tmp_path):
    plain = tmp_path / "a.jsonl"
    lines = [{"text": f"{PROSE} {i}.", "title": f"J{i}"} for i in range(6)] + [{"text": 3}, {"title": "x"}]
    plain.write_text("".join(json.dumps(r) + "\n" for r in lines) + "{broken\n")
    pq.write_table(
        pa.table({"text": [PROSE, "Contents"], "title": ["P0", "P1"]}),
        tmp_path / "b.parquet",
        row_group_size=1,
    )
    (tmp_path / "c.jsonl.gz").write_bytes(gzip.compress(b'{"text": "x"}\n' * 1000)[:-20])
    config = DocumentsConfig(inputs=("in",), output="out", title_field="title", bytes_per_read=100)
    files = sorted(str(p) for p in tmp_path.iterdir())
    outcomes = pipeline | beam.Create(files) | ReadDocuments(config)
    expected = [("document", "", f"J{i}") for i in range(6)] + [
        ("rejected", "wrong_type", None),
        ("rejected", "missing_field", None),
        ("rejected", "not_json", None),
        ("document", "", "P0"),
        ("dropped", "empty_after_cleaning", None),
        ("file_error", "truncated_input", None),
    ]
    assert_that(_outcomes(outcomes), equal_to(expected))
    pipeline.run()


def test_sentence_rows_are_grouped_by_a_field_across_files_in_file_order(pipeline, tmp_path):
    rows = [{"text": f"Sentence {i} of book {i % 3} is here.", "book": i % 3} for i in range(30)]
    for part in range(2):
        half = rows[part * 15 : (part + 1) * 15]
        pq.write_table(pa.Table.from_pylist(half), tmp_path / f"part-{part}.parquet", row_group_size=4)
    config = DocumentsConfig(inputs=("in",), output="out", group_field="book", min_document_words=0)
    files = sorted(str(p) for p in tmp_path.iterdir())
    outcomes = pipeline | beam.Create(files) | ReadDocuments(config)
    documents = outcomes | beam.Map(lambda o: (o.row["title"], o.row["sentences"], o.counts["grouped_rows"]))
    expected = [(str(b), [r["text"] for r in rows if r["book"] == b], 10) for b in range(3)]
    assert_that(documents, equal_to(expected))
    pipeline.run()
