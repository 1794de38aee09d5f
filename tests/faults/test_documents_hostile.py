"""`pipelines documents` on hostile input: a huge line, wrong types, invalid UTF-8 and lone
surrogates are counted rejects; a truncated gzip, a damaged Parquet file or one without the text
column, a JSON array, rows of single sentences, files of another format and a DatasetDict folder
are each one `error:` line, never a traceback, and never a COMPLETED output unless allowed.

The prose is real: paragraphs of a Project Gutenberg novel."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from schemas.inputs import MAX_LINE_BYTES
from tests.conftest import GUTENBERG, require
from tests.e2e.conftest import FAST_RUNNER, read_output, read_rejects, run_cli


@pytest.fixture(scope="module")
def paragraphs() -> list[str]:
    book = sorted(require(GUTENBERG).glob("*.txt"))[0].read_text(encoding="utf-8-sig")
    return [" ".join(p.split()) for p in book.split("\n\n") if len(p.split()) > 40][20:80]


def _jsonl(rows: list) -> bytes:
    return b"".join(r if isinstance(r, bytes) else json.dumps(r).encode() + b"\n" for r in rows)


def _run(tmp_path, *inputs: str, expect: int, extra: tuple = ()):
    out = tmp_path / "out"
    args = [a for path in inputs for a in ("--input", path)]
    result = run_cli("documents", *args, "--output", str(out), *extra, *FAST_RUNNER, expect=expect)
    assert "Traceback" not in result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == (expect != 0)
    return out, result, errors


def test_bad_records_are_counted_rejects_and_the_rest_is_kept(tmp_path, paragraphs):
    rows = [{"id": i, "text": p} for i, p in enumerate(paragraphs[:20])]
    rows += [
        {"id": "huge", "text": ""},  # replaced below by a line over the limit
        {"id": "number", "text": 42},
        {"id": "list", "text": ["a", "b"]},
        {"id": "null", "text": None},
        {"id": "empty", "text": "   "},
        {"id": "surrogate", "text": "half of a pair \ud83d alone"},
        b'{"id": "latin-1", "text": "caf\xe9 au lait"}\n',
        b"{not json\n",
        {"id": "no-text", "body": paragraphs[0]},
        {"id": True, "text": paragraphs[1]},
    ]
    data = _jsonl(rows).replace(
        b'{"id": "huge", "text": ""}', b'{"id": "huge", "text": "' + b"x" * (MAX_LINE_BYTES + 10) + b'"}'
    )
    (tmp_path / "web.jsonl").write_bytes(data)
    out, result, _ = _run(tmp_path, str(tmp_path / "web.jsonl"), expect=0, extra=("--id-field", "id"))
    _, stats, tables = read_output(out)
    assert stats["documents_out"] == 20 and stats["reconciles"] and stats["records_in"] == 30
    assert stats["rejected"] == {
        "empty_field": 1,
        "line_too_long": 1,
        "missing_field": 2,
        "not_json": 1,
        "undecodable": 2,
        "wrong_type": 3,
    }
    details = {r["record_id"]: (r["reason"], r["detail"]) for r in read_rejects(out)}
    assert details["number"] == ("wrong_type", "--text-field 'text' is of type int, not a string")
    assert details["null"] == ("missing_field", "--text-field 'text' is null")
    assert ("missing_field", "no field 'text' (--text-field); its fields: body, id") in details.values()
    assert sorted(tables["all"].column("page_id").to_pylist()) == list(range(20))


def test_a_truncated_gzip_fails_the_run_unless_allowed(tmp_path, paragraphs):
    rows = [{"text": p} for p in paragraphs] * 120  # 3.5 MB: the cut falls after the first MiB read
    data = gzip.compress(_jsonl(rows), mtime=0)
    (tmp_path / "cut.jsonl.gz").write_bytes(data[: len(data) * 3 // 4])
    path = str(tmp_path / "cut.jsonl.gz")
    out, _, (error,) = _run(tmp_path, path, expect=1)
    assert error.startswith(f"error: --output {out}: not marked COMPLETED: {path}: OSError: ")
    assert "records before it were kept; --allow-file-errors keeps what was read before each error" in error
    assert not (out / "COMPLETED").exists()
    assert json.loads((out / "stats.json").read_text())["file_errors"] == {"truncated_input": 1}
    out, result, _ = _run(tmp_path, path, expect=0, extra=("--allow-file-errors", "--overwrite"))
    _, stats, _ = read_output(out)
    assert (out / "COMPLETED").exists() and 0 < stats["records_in"] < len(rows)
    assert "warning: 1 input file(s) ended early (truncated_input)" in result.stderr


def test_a_parquet_file_without_the_text_column_is_one_line(tmp_path, paragraphs):
    path = tmp_path / "train-00000-of-00001.parquet"
    pq.write_table(
        pa.table({"id": ["1", "2"], "url": ["u", "v"], "title": ["a", "b"], "content": paragraphs[:2]}), path
    )
    _, _, (error,) = _run(tmp_path, str(path), expect=1)
    assert error == (
        f"error: {path}: no column 'text' (--text-field); its columns: id, url, title, content; "
        "the closest is 'content'"
    )
    good = tmp_path / "a.parquet"  # first, so the check before the run passes and the run finds it
    pq.write_table(pa.table({"text": paragraphs[:5]}), good)
    out, _, (error,) = _run(tmp_path, str(good), str(path), expect=1)
    assert error.startswith(f"error: --output {out}: not marked COMPLETED: {path}: no column 'text'")


def test_damaged_files_are_file_errors(tmp_path, paragraphs):
    pq.write_table(pa.table({"text": paragraphs}), tmp_path / "a.parquet", row_group_size=10)
    data = (tmp_path / "a.parquet").read_bytes()
    (tmp_path / "b.parquet").write_bytes(data[: len(data) // 2])  # no footer
    (tmp_path / "c.arrow").write_bytes(b"not arrow at all" * 100)
    out, _, (error,) = _run(tmp_path, str(tmp_path / "*.parquet"), str(tmp_path / "c.arrow"), expect=1)
    assert "(and 1 more file(s): see stats.json)" in error
    assert json.loads((out / "stats.json").read_text())["file_errors"] == {"unreadable": 2}


def test_layouts_that_cannot_be_read_as_asked_are_one_line(tmp_path, paragraphs):
    (tmp_path / "array.json").write_text(json.dumps([{"text": p} for p in paragraphs]))
    _, _, (error,) = _run(tmp_path, str(tmp_path / "array.json"), expect=1)
    assert error.endswith("a JSON array, not JSON Lines (one object a line): write it with lines=True")
    sentences = [{"text": s.strip() + "."} for p in paragraphs for s in p.split(".") if len(s.split()) > 3]
    (tmp_path / "bookcorpus.jsonl").write_bytes(_jsonl(sentences))
    _, result, (error,) = _run(tmp_path, str(tmp_path / "bookcorpus.jsonl"), expect=2)
    assert "next-sentence prediction needs document boundaries; give --group-field FIELD" in error
    (tmp_path / "notes.txt").write_text(paragraphs[0])
    _, _, (error,) = _run(tmp_path, str(tmp_path / "notes.txt"), expect=2)
    assert error.endswith(
        "notes.txt is not JSON Lines (.jsonl, .json, .ndjson; plain, .gz, .zst or .bz2), Parquet (.parquet) or Arrow (.arrow)"
    )
    _, _, (error,) = _run(
        tmp_path,
        str(tmp_path / "bookcorpus.jsonl"),
        expect=2,
        extra=("--group-rows", "5", "--group-field", "book"),
    )
    assert error.endswith("give --group-field or --group-rows, not both")


def test_a_dataset_dict_folder_is_refused_and_its_split_read(tmp_path, paragraphs):
    import datasets

    datasets.disable_progress_bars()
    dataset = datasets.Dataset.from_dict({"text": paragraphs})
    datasets.DatasetDict({"train": dataset, "validation": dataset}).save_to_disk(str(tmp_path / "dd"))
    _, _, (error,) = _run(tmp_path, str(tmp_path / "dd"), expect=2)
    assert (
        error
        == f"error: --input {tmp_path / 'dd'}: a DatasetDict saved by datasets; give one of its splits' folders"
    )
    out, _, _ = _run(tmp_path, str(tmp_path / "dd" / "train"), expect=0)
    assert read_output(out)[1]["documents_out"] == len(paragraphs)
