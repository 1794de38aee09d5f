"""`pipelines text` (and `pipelines books`) on input that cannot be decoded: exit 1, one line
naming the file, the byte and the line, no `COMPLETED`, `stats.json` kept; with
`--allow-file-errors` the documents before the bad byte are kept and the rest is counted
(`bytes_not_read`, `lines_not_read`), the counts reconciling.

The text files are real: a Project Gutenberg book cut into create_pretraining_data.py's format.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.books.pipeline import read_book_outcome
from pipelines.plaintext.pipeline import read_text_file
from pipelines.stage import FILE_ERROR
from tests.conftest import GUTENBERG, require
from tests.e2e.conftest import FAST_RUNNER, read_output, read_rejects, run_cli
from tests.faults.test_pipeline_outputs import write_books

NOT_COMPLETED = "error: --output {out}: not marked COMPLETED: "
ALLOW = "; --allow-file-errors keeps what was read before each error"


def _documents(count: int) -> list[list[str]]:
    """``count`` documents of one sentence a line, from a real book's paragraphs."""
    book = sorted(require(GUTENBERG).glob("*.txt"))[0].read_text(encoding="utf-8", errors="replace")
    paragraphs = [" ".join(p.split()) for p in book.split("\n\n") if len(p.split()) > 30]
    return [[s.strip() + "." for s in p.split(".") if s.strip()] for p in paragraphs[40 : 40 + count]]


def _as_file(documents: list[list[str]]) -> bytes:
    return ("\n\n".join("\n".join(doc) for doc in documents) + "\n").encode("utf-8")


def _errors(result) -> list[str]:
    assert "Traceback" not in result.output
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def _text(inputs: Path, out: Path, *extra: str, expect: int):
    return run_cli(
        "text", "--input", f"{inputs}/*.txt", "--output", str(out), *FAST_RUNNER, *extra, expect=expect
    )


def test_an_undecodable_byte_fails_the_run_naming_file_byte_and_line(tmp_path):
    documents = _documents(6)
    data = _as_file(documents)
    # Document 4 (index 3) holds a Latin-1 byte: documents 0-2 are read whole, the rest is not.
    start = data.index(documents[3][0].encode())
    offset = data.index(b" ", start + 10)
    data = data[:offset] + b"\xe9" + data[offset + 1 :]
    inputs = tmp_path / "in"
    inputs.mkdir()
    path = inputs / "sample_text.txt"
    path.write_bytes(data)
    line = data[:offset].count(b"\n") + 1
    read_bytes = len(_as_file(documents[:3])) + 1  # the blank line after document 3
    first_unread = sum(len(d) + 1 for d in documents[:3]) + 1
    detail = (
        f"not UTF-8 at byte {offset:,} (line {line:,}); 3 document(s) before it read, "
        f"{len(data) - read_bytes:,} bytes from line {first_unread:,} on not read"
    )

    out = tmp_path / "failed"
    result = _text(inputs, out, expect=1)
    assert _errors(result) == [NOT_COMPLETED.format(out=out) + f"{path}: {detail}" + ALLOW]
    assert not (out / "COMPLETED").exists() and not (out / "manifest.json").exists()
    stats = json.loads((out / "stats.json").read_text())
    assert stats["files_with_errors"] == [{"file": str(path), "reason": "undecodable", "detail": detail}]

    kept = tmp_path / "kept"
    result = _text(inputs, kept, "--allow-file-errors", expect=0)
    assert not _errors(result)
    _, stats, tables = read_output(kept)
    assert (kept / "COMPLETED").exists()
    assert sorted(tables["train"].column("sentences").to_pylist()) == sorted(documents[:3])
    assert stats["file_errors"] == {"undecodable": 1} and stats["reconciles"] is True
    assert stats["records_in"] == stats["documents_out"] == 3
    assert stats["bytes_not_read"] == len(data) - read_bytes
    assert stats["lines_not_read"] == data.count(b"\n") - (first_unread - 1)
    (reject,) = read_rejects(kept)
    assert reject["reason"] == "undecodable" and reject["detail"] == detail and "\ufffd" in reject["excerpt"]


def test_utf16_text_is_not_quietly_dropped(tmp_path):
    """UTF-16 (with a BOM: invalid UTF-8 at byte 0; without: NUL bytes) fails the run; the line
    names the first file and counts the others."""
    text = _as_file(_documents(2)).decode("utf-8")
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a-bom.txt").write_bytes(text.encode("utf-16"))
    (inputs / "b-le.txt").write_bytes(text.encode("utf-16-le"))
    (inputs / "c-good.txt").write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    result = _text(inputs, out, expect=1)
    size = len(text.encode("utf-16"))
    assert _errors(result) == [
        NOT_COMPLETED.format(out=out)
        + f"{inputs / 'a-bom.txt'}: not UTF-8 at byte 0 (line 1); 0 document(s) "
        f"before it read, {size:,} bytes from line 1 on not read (and 1 more file(s): see stats.json)" + ALLOW
    ]
    stats = json.loads((out / "stats.json").read_text())
    assert stats["file_errors"] == {"binary": 1, "undecodable": 1}
    assert [f["reason"] for f in stats["files_with_errors"]] == ["undecodable", "binary"]
    assert stats["files_with_errors"][1]["detail"].startswith(
        "a NUL byte (UTF-16, or not text) at byte 1 (line 1)"
    )
    assert stats["records_in"] == stats["documents_out"] == 2 and stats["reconciles"]


def test_an_unreadable_file_is_a_file_error_not_a_reject(tmp_path, monkeypatch):
    """A read that fails (a bucket outage, a permission) is a file error, in `text` and in `books`."""
    from pipelines import files

    def fail(path: str) -> bytes:
        raise OSError(f"connection reset reading {path}")

    monkeypatch.setattr(files, "read_bytes", fail)
    monkeypatch.setattr(files, "open_binary", fail)
    (error,) = read_text_file("gs://b/in/a.txt", 0)
    assert error.kind == FILE_ERROR and error.reason == "unreadable" and error.counts["records_in"] == 0
    book = read_book_outcome("gs://b/books/a.txt", 0)
    assert book.kind == FILE_ERROR and book.reason == "unreadable"
    assert "connection reset" in book.row["detail"]


def test_an_undecodable_book_fails_the_books_run_too(tmp_path):
    """`pipelines books`: a book with a UTF-16 BOM and more undecodable bytes than the tolerated
    share is a file error (binary files stay rejects)."""
    books = write_books(tmp_path / "books", count=2)
    utf16 = (books / "book0.txt").read_text().encode("utf-16")
    broken = books / "broken.txt"
    broken.write_bytes(b"\x00\xd8".join(utf16[i : i + 20] for i in range(0, len(utf16), 20)))
    (books / "image.txt").write_bytes(bytes(range(256)) * 8)
    args = (
        "books",
        "--input",
        f"{books}/*.txt",
        "--num-shards",
        "1",
        "--min-document-words",
        "10",
        *FAST_RUNNER,
    )
    out = tmp_path / "failed"
    result = run_cli(*args, "--output", str(out), expect=1)
    (line,) = _errors(result)
    assert line.startswith(NOT_COMPLETED.format(out=out) + f"{broken}: utf-16-le BOM but ")
    assert line.endswith("(beyond the tolerated share)" + ALLOW)
    assert not (out / "COMPLETED").exists() and (out / "stats.json").exists()

    kept = tmp_path / "kept"
    run_cli(*args, "--output", str(kept), "--allow-file-errors")
    _, stats, tables = read_output(kept)
    assert stats["file_errors"] == {"undecodable": 1} and stats["rejected"] == {"binary": 1}
    assert stats["records_in"] == 3 and stats["documents_out"] == 2 and stats["reconciles"]
    assert {Path(o).name for o in tables["all"].column("origin").to_pylist()} == {"book0.txt", "book1.txt"}


@pytest.mark.parametrize("name", ["text", "books", "wikipedia"])
def test_the_flag_says_what_it_does(name):
    result = run_cli(name, "--help")
    assert "had errors (truncated, undecodable, unreadable)" in " ".join(result.output.split())
