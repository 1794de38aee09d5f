"""Inputs with a line (or text) too long to hold: a 2 GB sparse file, ``/dev/zero``, a huge text
given to the tokenizer. Each is one error naming the file, the line and the limit, read no further
than the limit, never a MemoryError or the text itself in the message."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pipelines.books.pipeline import read_book_outcome
from pipelines.plaintext.pipeline import read_text_file
from pipelines.stage import FILE_ERROR
from schemas.commands import InputError
from schemas.inputs import MAX_LINE_BYTES
from tests.conftest import SHARED_DATA, require
from tests.e2e.conftest import FAST_RUNNER, run_cli
from wordpiece.tokenizer import MAX_TEXT_CHARS, WordPieceTokenizer

LIMIT = f"line 1 is longer than the limit of {MAX_LINE_BYTES:,} bytes"


def _sparse(path: Path, size: int = 2 << 30) -> str:
    with path.open("wb") as f:
        f.truncate(size)
    return str(path)


def _devices() -> list[str]:
    return ["/dev/zero"] if os.path.exists("/dev/zero") else []


@pytest.fixture(params=["sparse 2 GB", *_devices()])
def endless(request, tmp_path) -> str:
    """A file whose first line has no end in sight: a 2 GB sparse file, or /dev/zero."""
    return _sparse(tmp_path / "sparse.txt") if request.param == "sparse 2 GB" else request.param


def test_a_book_with_an_endless_line_is_a_file_error_naming_line_and_limit(endless):
    outcome = read_book_outcome(endless, 0)
    assert (outcome.kind, outcome.reason) == (FILE_ERROR, "line_too_long")
    assert outcome.row["detail"] == LIMIT and outcome.row["excerpt"] is None


def test_a_text_file_with_an_endless_line_is_a_file_error_naming_line_and_limit(endless):
    (error,) = read_text_file(endless, 0)
    assert (error.kind, error.reason) == (FILE_ERROR, "line_too_long")
    assert error.row["detail"].startswith(
        f"a line longer than the limit of {MAX_LINE_BYTES:,} bytes at byte 0 (line 1); 0 document(s) before it read"
    )
    assert error.counts["text_files"] == 1 and error.counts["records_in"] == 0


def test_the_documents_before_a_long_line_are_kept(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(
        b"One sentence.\nTwo.\n\nSecond document.\n\nCut " + b"x" * (MAX_LINE_BYTES + 5) + b"\nend\n"
    )
    *documents, error = read_text_file(str(path), 0)
    assert [d.row["sentences"] for d in documents] == [["One sentence.", "Two."], ["Second document."]]
    assert error.row["detail"].endswith(
        "(line 6); 2 document(s) before it read, " + f"{MAX_LINE_BYTES + 14:,} bytes from line 6 on not read"
    )
    assert error.counts["bytes_not_read"] == MAX_LINE_BYTES + 14 and "lines_not_read" not in error.counts


@pytest.mark.slow
def test_pipelines_text_on_a_sparse_file_exits_1_with_one_line(tmp_path):
    path = _sparse(tmp_path / "in" / "sparse.txt") if (tmp_path / "in").mkdir() is None else ""
    out = tmp_path / "out"
    result = run_cli("text", "--input", path, "--output", str(out), *FAST_RUNNER, expect=1)
    (line,) = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert f"{path}: a line longer than the limit of {MAX_LINE_BYTES:,} bytes at byte 0 (line 1)" in line
    assert len(line) < 600 and not (out / "COMPLETED").exists()


def test_the_tokenizer_refuses_a_text_beyond_its_limit_before_the_rust_library():
    tokenizer = WordPieceTokenizer.load(
        str(require(SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt")), cased=False
    )
    text = "word " * (MAX_TEXT_CHARS // 5 + 1)
    for call in (tokenizer.encode, tokenizer.tokens):
        with pytest.raises(
            InputError, match=f"longer than the {MAX_TEXT_CHARS:,} one tokenizer call takes"
        ) as err:
            call(text)
        assert "word" not in str(err.value)
    with pytest.raises(InputError):
        tokenizer.encode_batch(["fine", text])
    assert tokenizer.encode("word " * 10) == tokenizer.encode_batch(["word " * 10])[0]
