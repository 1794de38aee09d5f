"""Each stage's transforms on a handful of elements, with TestPipeline and assert_that."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
import pyarrow.ipc as ipc
from apache_beam.testing.util import assert_that, equal_to

from pipelines.books.pipeline import read_book_outcome
from pipelines.corpus.pipeline import keep_one_of_each, mark_or_keep
from pipelines.shuffle import GroupOnDisk
from pipelines.stage import DOCUMENT, WriteShards, document_sort_key
from pipelines.text import content_hash
from pipelines.wiki.pipeline import ReadTask, _ReadPages, page_outcome
from schemas import DOCUMENTS, storage


def _kinds(outcomes):
    return outcomes | beam.Map(lambda o: (o.kind, o.reason, (o.row or {}).get("title")))


def test_wikipedia_pages_to_outcomes(pipeline, small_dump, tmp_path):
    path = tmp_path / "dump.xml.bz2"
    path.write_bytes(small_dump)
    read = (
        pipeline
        | beam.Create([ReadTask(str(path))])
        | beam.ParDo(_ReadPages()).with_outputs(_ReadPages.FILE_ERRORS, main="pages")
    )
    outcomes = read.pages | beam.MapTuple(
        lambda origin, page: page_outcome(page, origin, min_document_words=8)
    )
    assert_that(
        _kinds(outcomes),
        equal_to(
            [
                ("document", "", "Alpha"),
                ("dropped", "redirect", None),
                ("dropped", "not_article_namespace", None),
                ("dropped", "disambiguation", None),
                ("dropped", "too_short", None),
            ]
        ),
    )
    assert_that(read[_ReadPages.FILE_ERRORS], equal_to([]), label="no file errors")
    sentences = outcomes | beam.Filter(lambda o: o.kind == DOCUMENT) | beam.Map(lambda o: o.row["sentences"])
    assert_that(
        sentences,
        equal_to(
            [
                [
                    "Alpha is a letter of the Greek alphabet.",
                    "It is used in many places and has a long history of use in science.",
                    "It came from the Phoenician letter aleph.",
                ]
            ]
        ),
        label="clean sentences",
    )
    pipeline.run()


def test_a_truncated_dump_keeps_its_pages_and_records_a_file_error(pipeline, small_dump, tmp_path):
    path = tmp_path / "cut.xml.bz2"
    path.write_bytes(small_dump[: len(small_dump) - 40])
    read = (
        pipeline
        | beam.Create([ReadTask(str(path))])
        | beam.ParDo(_ReadPages()).with_outputs(_ReadPages.FILE_ERRORS, main="pages")
    )
    errors = read[_ReadPages.FILE_ERRORS] | beam.Map(lambda o: (o.kind, o.reason, o.row["origin"]))
    assert_that(errors, equal_to([("file_error", "truncated_input", str(path))]))
    pipeline.run()


def test_books_to_outcomes(pipeline, tmp_path):
    prose = " ".join(f"This is sentence number {i} of a short invented story." for i in range(30))
    (tmp_path / "story.txt").write_text(f"{prose}\n\n{prose} The end.\n", encoding="utf-8")
    (tmp_path / "image.txt").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)
    (tmp_path / "tiny.txt").write_text("Too short to keep.\n", encoding="utf-8")
    paths = sorted(str(p) for p in tmp_path.iterdir())
    outcomes = pipeline | beam.Create(paths) | beam.Map(read_book_outcome, 100)
    assert_that(
        outcomes | beam.Map(lambda o: (o.kind, o.reason)),
        equal_to([("document", ""), ("rejected", "binary"), ("dropped", "too_short")]),
    )
    pipeline.run()


def _row(doc_id_text: str, source: str, origin: str) -> dict:
    sentences = [doc_id_text]
    return {
        "doc_id": content_hash(sentences),
        "source": source,
        "origin": origin,
        "title": origin,
        "page_id": None,
        "revision_id": None,
        "sentences": sentences,
        "num_sentences": 1,
        "num_words": len(doc_id_text.split()),
        "num_chars": len(doc_id_text),
    }


def test_exact_duplicates_keep_the_first_in_sort_order(pipeline, tmp_path):
    rows = [
        _row("Same text.", "books", "b.txt"),
        _row("Same text.", "books", "a.txt"),
        _row("Other.", "books", "c"),
    ]
    outcomes = (
        pipeline
        | beam.Create(rows)
        | beam.Map(lambda r: (r["doc_id"], r))
        | GroupOnDisk(keep_one_of_each, storage.Folder(tmp_path), order=document_sort_key)
        | beam.Map(lambda o: (o.kind, o.reason, (o.row or {}).get("origin"), o.counts))
    )
    assert_that(
        outcomes,
        equal_to(
            [
                ("document", "", "a.txt", None),
                ("dropped", "exact_duplicate", None, {"largest_id_group": 2}),
                ("document", "", "c", None),
            ]
        ),
    )
    pipeline.run()


def test_a_document_is_dropped_when_one_it_is_compared_with_is_similar(pipeline, tmp_path):
    a, b = _row("Kept text.", "books", "a"), _row("Marked text.", "books", "b")
    same, other = (
        np.arange(10, dtype=np.uint32).tobytes().hex(),
        np.arange(10, 20, dtype=np.uint32).tobytes().hex(),
    )
    values = [
        (a["doc_id"], ["row", a, same]),
        (a["doc_id"], ["near", "x", other]),
        (b["doc_id"], ["near", "y", other]),
        (b["doc_id"], ["row", b, same]),
        (b["doc_id"], ["near", a["doc_id"], same]),
    ]
    outcomes = (
        pipeline
        | beam.Create(values)
        | GroupOnDisk(
            lambda doc_id, vs: mark_or_keep(doc_id, vs, 0.8),
            storage.Folder(tmp_path),
            order=lambda v: v[:2] if v[0] == "near" else v[:1],
        )
    )
    assert_that(
        outcomes | beam.Map(lambda o: (o.kind, o.reason, (o.row or {}).get("origin"))),
        equal_to([("document", "", "a"), ("dropped", "near_duplicate", None)]),
    )
    pipeline.run()


def test_write_shards_writes_every_shard_sorted(pipeline, tmp_path):
    rows = [_row(f"Document number {i}.", "books", f"{i}.txt") for i in range(20)]
    entries = (
        pipeline
        | beam.Create(rows)
        | WriteShards(storage.Folder(tmp_path), "all", 3, DOCUMENTS, lambda r: r["doc_id"], document_sort_key)
    )
    assert_that(
        entries | beam.Map(lambda e: e["path"]),
        equal_to([f"all/part-0000{i}-of-00003.arrow" for i in range(3)]),
    )
    assert_that(
        entries | beam.Map(lambda e: e["num_rows"]) | beam.CombineGlobally(sum),
        equal_to([20]),
        label="all rows",
    )
    pipeline.run()
    for shard in sorted((tmp_path / "all").iterdir()):
        ids = ipc.open_file(str(shard)).read_all().column("doc_id").to_pylist()
        assert ids == sorted(ids)
