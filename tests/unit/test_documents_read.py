"""`pipelines documents`' pure parts: file kinds, byte-range lines, JSON and table values checked,
read tasks planned and read, the books' cleaning shared, rows grouped, the launcher's checks."""

from __future__ import annotations

import gzip
import io as stdlib_io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.books.clean import clean_book, clean_text, decode_book
from pipelines.config import DocumentsConfig
from pipelines.documents.pipeline import (
    check_sample,
    expand_documents,
    group_member,
    group_outcome,
    record_outcome,
)
from pipelines.documents.read import (
    FilePart,
    Record,
    file_kind,
    iter_lines,
    json_values,
    plan_reads,
    read_part,
    value_problem,
)
from schemas.commands import InputError, UsageError

TEXT = {"text": "--text-field"}
PROSE = "The river rose in the night and the village woke to water in the streets. " * 3


def _config(**kwargs) -> DocumentsConfig:
    return DocumentsConfig(inputs=("in",), output="out", **kwargs)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("a/train-00000-of-00041.parquet", ("parquet", None)),
        ("wiki-0000.json.gz", ("jsonl", "gzip")),
        ("c4.JSONL.ZST", ("jsonl", "zstd")),
        ("x.ndjson.bz2", ("jsonl", "bz2")),
        ("data-00000-of-00002.arrow", ("arrow", None)),
        ("plain.jsonl", ("jsonl", None)),
        ("notes.txt", None),
        ("table.parquet.gz", None),
        ("README", None),
    ],
)
def test_file_kind_by_name(name, kind):
    assert file_kind(name) == kind


def _lines(data: bytes, start: int, end: float, limit: int = 1 << 20) -> list[tuple[int, bytes | None]]:
    f = stdlib_io.BytesIO(data)
    f.seek(max(start - 1, 0))
    lines = iter_lines(f, max(start - 1, 0), end, limit)
    if start:
        next(lines, None)
    return list(lines)


def test_byte_ranges_give_every_line_once_whatever_the_cut():
    data = b"".join(b'{"n": %d}\n' % i for i in range(50)) + b'{"n": "last, no newline"}'
    whole = _lines(data, 0, float("inf"))
    assert len(whole) == 51 and whole[-1] == (data.rindex(b"\n") + 1, b'{"n": "last, no newline"}')
    for size in (1, 7, 9, 10, 64, len(data)):
        cut = [line for start in range(0, len(data), size) for line in _lines(data, start, start + size)]
        assert cut == whole, size


def test_a_line_over_the_limit_is_none_and_the_lines_after_it_are_read():
    data = b"short\n" + b"x" * 5000 + b"\nafter\n" + b"y" * 5000
    assert _lines(data, 0, float("inf"), limit=100) == [
        (0, b"short"),
        (6, None),
        (5007, b"after"),
        (5013, None),
    ]


def test_json_values_name_what_is_wrong():
    assert json_values(b'{"text": "a", "id": 3}', TEXT) == {"text": "a"}
    assert json_values(b'{"txt": "a", "id": 3}', TEXT) == (
        "missing_field",
        "no field 'text' (--text-field); its fields: id, txt; the closest is 'txt'",
    )
    assert json_values(b'{"text": "caf\xe9"}', TEXT)[0] == "undecodable"
    assert json_values(b'{"text": ', TEXT)[0] == "not_json"
    assert json_values(b"[1, 2]", TEXT) == ("not_json", "a JSON list, not an object")
    assert json_values(b'{"text": "a"}', {**TEXT, "title": "--title-field"}) == {"text": "a", "title": None}


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"text": None}, "missing_field"),
        ({"text": 5}, "wrong_type"),
        ({"text": ["a"]}, "wrong_type"),
        ({"text": "  \n"}, "empty_field"),
        ({"text": "lone \ud800 surrogate"}, "undecodable"),
        ({"text": "\x00\x01\x02 binary"}, "binary"),
        ({"text": "caf\ufffd " * 20}, "undecodable"),
        ({"text": "fine", "id": True}, "wrong_type"),
        ({"text": "fine", "id": 1.5}, "wrong_type"),
        ({"text": "fine", "id": None}, None),
        ({"text": "fine", "id": 12}, None),
    ],
)
def test_value_problems(values, problem):
    fields = {"text": "--text-field", "id": "--id-field"}
    found = value_problem({"id": None, **values}, fields)
    assert (found and found[0]) == problem


def test_plain_json_lines_are_planned_in_ranges_and_read_as_the_whole_file(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_bytes(
        b"".join(json.dumps({"text": f"{PROSE} {i}", "id": f"d{i}"}).encode() + b"\n" for i in range(40))
    )
    fields = {"text": "--text-field", "id": "--id-field"}
    parts = plan_reads(str(path), fields, 1000)
    assert len(parts) == -(-path.stat().st_size // 1000) and parts[0] == FilePart(str(path), 0, 1000)
    ranged = [r for part in parts for r in read_part(part, fields)]
    (whole,) = plan_reads(str(path), fields, 1000, whole=True)
    assert (
        [r.name for r in ranged] == [r.name for r in read_part(whole, fields)] == [f"d{i}" for i in range(40)]
    )
    assert [r.position for r in read_part(whole, fields)] == list(range(40))  # rows, for --group-rows


def test_a_json_array_is_a_file_error(tmp_path):
    path = tmp_path / "array.json"
    path.write_text(json.dumps([{"text": PROSE}] * 3))
    (error,) = read_part(plan_reads(str(path), TEXT, 10, whole=True)[0], TEXT)
    assert (error.kind, error.reason) == ("file_error", "json_array")
    with pytest.raises(InputError, match="a JSON array, not JSON Lines"):
        check_sample([str(path)], _config())


def test_a_truncated_gzip_keeps_the_records_before_the_cut(tmp_path):
    lines = b"".join(json.dumps({"text": f"{PROSE} {i}"}).encode() + b"\n" for i in range(20000))
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(gzip.compress(lines)[:-1000])
    (part,) = plan_reads(str(path), TEXT, 10)
    items = list(read_part(part, TEXT))
    *records, error = items
    assert 0 < len(records) < 20000 and all(isinstance(r, Record) for r in records)
    assert (error.kind, error.reason) == ("file_error", "truncated_input")
    assert error.row["detail"].endswith(f"the {len(records):,} records before it were kept")


def _parquet(path, table: pa.Table, row_group_size: int = 2) -> str:
    pq.write_table(table, path, row_group_size=row_group_size)
    return str(path)


def test_parquet_row_groups_number_rows_across_the_file(tmp_path):
    texts = [f"{PROSE} {i}" for i in range(5)]
    path = _parquet(tmp_path / "t.parquet", pa.table({"text": texts, "title": [f"T{i}" for i in range(5)]}))
    fields = {"text": "--text-field", "title": "--title-field"}
    parts = plan_reads(path, fields, 10)
    assert [(p.start, p.end, p.first_row) for p in parts] == [(0, 1, 0), (1, 2, 2), (2, 3, 4)]
    records = [r for p in parts for r in read_part(p, fields)]
    assert [(r.position, r.name, r.values["title"]) for r in records] == [
        (i, f"row {i}", f"T{i}") for i in range(5)
    ]


def test_a_parquet_file_without_the_text_column_is_one_error_naming_its_columns(tmp_path):
    path = _parquet(tmp_path / "t.parquet", pa.table({"id": ["1"], "content": [PROSE]}))
    (part,) = plan_reads(path, TEXT, 10)  # one task, not one per row group
    (error,) = read_part(part, TEXT)
    assert (error.reason, error.row["detail"]) == (
        "missing_column",
        "no column 'text' (--text-field); its columns: id, content; the closest is 'content'",
    )
    with pytest.raises(InputError, match=f"^{path}: no column 'text' .* the closest is 'content'$"):
        check_sample([path], _config())


def test_a_text_column_of_numbers_and_invalid_utf8_are_rejects(tmp_path):
    numbers = _parquet(tmp_path / "n.parquet", pa.table({"text": [1, 2]}))
    rejects = [(o.reason, o.row["detail"]) for o in read_part(plan_reads(numbers, TEXT, 10)[0], TEXT)]
    assert rejects == [("wrong_type", "--text-field 'text' is of type int, not a string")] * 2
    invalid = pa.array([PROSE.encode(), b"\xff\xfe not utf-8"]).view(pa.string())
    path = _parquet(tmp_path / "bad.parquet", pa.table({"text": invalid}))
    good, bad = read_part(plan_reads(path, TEXT, 10, whole=True)[0], TEXT)
    assert isinstance(good, Record) and (bad.reason, bad.row["record_id"]) == ("undecodable", "row 1")


def test_arrow_stream_and_file_formats_are_read(tmp_path):
    table = pa.table({"text": [PROSE, PROSE + " More."]})
    for name, writer in (("s.arrow", pa.ipc.new_stream), ("f.arrow", pa.ipc.new_file)):
        with pa.OSFile(str(tmp_path / name), "wb") as sink, writer(sink, table.schema) as w:
            w.write_table(table, max_chunksize=1)
        records = list(read_part(FilePart(str(tmp_path / name)), TEXT))
        assert [r.values["text"] for r in records] == table.column("text").to_pylist()


def test_a_document_is_cleaned_as_a_book_would_be(gutenberg_books):
    data = gutenberg_books[0].read_bytes()
    book = clean_book(data, "b.txt")
    assert clean_text(decode_book(data, "b.txt").text, "b.txt").paragraphs == book.paragraphs
    config = _config(title_field="title", id_field="id")
    record = Record(
        "f.parquet", 0, "7", {"text": decode_book(data, "b").text, "title": "A  Book\n", "id": "7"}
    )
    outcome = record_outcome(record, config)
    assert (outcome.row["title"], outcome.row["page_id"], outcome.row["source"]) == ("A Book", 7, "documents")
    assert len(outcome.row["sentences"]) > 1000


def test_a_record_of_headings_only_is_dropped():
    config = _config()
    headings_only = record_outcome(Record("f", 0, "row 0", {"text": "Contents\n\nChapter One"}), config)
    assert (headings_only.kind, headings_only.reason) == ("dropped", "empty_after_cleaning")


def test_sentence_rows_group_in_file_order():
    config = _config(group_rows=3, min_document_words=0)
    rows = [Record("b.parquet", i, f"row {i}", {"text": f"Sentence {i} is here."}) for i in range(7)]
    keyed = [group_member(r, config) for r in reversed(rows)]
    groups: dict[str, list] = {}
    for key, member in keyed:
        groups.setdefault(key, []).append(member)
    assert sorted(groups) == ["b.parquet\t0", "b.parquet\t1", "b.parquet\t2"]
    document = group_outcome("b.parquet\t0", groups["b.parquet\t0"], config)
    assert document.row["sentences"] == ["Sentence 0 is here.", "Sentence 1 is here.", "Sentence 2 is here."]
    assert document.counts == {"grouped_rows": 3}
    by_book = _config(group_field="book", min_document_words=0)
    key, _ = group_member(Record("b", 0, "row 0", {"text": "A sentence.", "book": 12}), by_book)
    assert group_outcome(key, [("b", 0, "A sentence.", None)], by_book).row["title"] == "12"


def test_rows_of_one_sentence_each_are_refused_without_a_grouping(tmp_path):
    path = tmp_path / "bookcorpus.jsonl"
    path.write_text(
        "".join(json.dumps({"text": f"usually , he would be there at {i} ."}) + "\n" for i in range(50))
    )
    with pytest.raises(UsageError, match="50 of its first 50 records hold one sentence each: next-sentence"):
        check_sample([str(path)], _config())
    check_sample([str(path)], _config(group_rows=1))  # each record a document, as asked


def test_inputs_are_files_folders_and_save_to_disk_folders(tmp_path):
    import datasets

    folder = tmp_path / "hub"
    folder.mkdir()
    for name in ("a.parquet", "b.jsonl.zst", "README.md", ".gitattributes"):
        (folder / name).write_bytes(b"")
    assert expand_documents((str(folder),)) == [str(folder / "a.parquet"), str(folder / "b.jsonl.zst")]
    with pytest.raises(UsageError, match=r"is not JSON Lines .* Parquet \(.parquet\) or Arrow"):
        expand_documents((str(folder / "*"),))
    datasets.disable_progress_bars()
    dataset = datasets.Dataset.from_dict({"text": [PROSE] * 4})
    dataset.save_to_disk(str(tmp_path / "saved"), num_shards=2)
    assert expand_documents((str(tmp_path / "saved"),)) == [
        str(tmp_path / "saved" / f"data-0000{i}-of-00002.arrow") for i in range(2)
    ]
    datasets.DatasetDict({"train": dataset, "test": dataset}).save_to_disk(str(tmp_path / "dict"))
    with pytest.raises(UsageError, match=r"a DatasetDict saved by datasets; give one of its splits' folders"):
        expand_documents((str(tmp_path / "dict"),))


def test_the_config_lists_every_problem():
    with pytest.raises(ValueError) as err:
        _config(text_field="t", title_field="t", group_field="g", group_rows=0, id_field="")
    message = str(err.value)
    for part in (
        "must name different fields",
        "not both",
        "--group-rows must be between",
    ):
        assert part in message
    assert _config(title_field="title").fields() == {"text": "--text-field", "title": "--title-field"}
