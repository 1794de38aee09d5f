"""`pipelines text`: files in create_pretraining_data.py's input format into a corpus output.

bert-tensorflow 1.0.4 does not ship the reference's sample_text.txt, so a file in that format
(one sentence per line, a blank line between documents) is built at test time from a real
Gutenberg book; no third-party text is committed.
"""

from __future__ import annotations

import json

import pytest

from pipelines.text import split_sentences
from tests.conftest import SHARED_DATA, require
from tests.e2e.conftest import FAST_RUNNER, read_output, read_rejects, run_cli

pytestmark = pytest.mark.slow


def _reference_format(book_text: str, documents: int, paragraphs_per_doc: int) -> tuple[str, list[list[str]]]:
    paragraphs = [" ".join(p.split()) for p in book_text.split("\n\n") if len(p.split()) > 20]
    docs = []
    for d in range(documents):
        chunk = paragraphs[100 + d * paragraphs_per_doc : 100 + (d + 1) * paragraphs_per_doc]
        docs.append([s for p in chunk for s in split_sentences(p)])
    return "\n\n".join("\n".join(doc) for doc in docs) + "\n", docs


def test_text_reads_reference_format_and_counts_bad_files(tmp_path):
    book = sorted(require(SHARED_DATA / "books" / "gutenberg").glob("*.txt"))[0]
    text, docs = _reference_format(book.read_text(encoding="utf-8", errors="replace"), 6, 4)
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "sample_text.txt").write_text(text, encoding="utf-8")
    (inputs / "empty.txt").write_bytes(b"")
    (inputs / "binary.txt").write_bytes(bytes(range(256)) * 4)
    (inputs / "no_blank_lines.txt").write_text("One sentence.\nAnother sentence.\nA third.\n")
    out = tmp_path / "corpus"
    # binary.txt is not text: the run fails in one line naming it (tests/faults/test_text_*.py)
    # unless --allow-file-errors, which keeps what the other files hold.
    args = ("text", "--input", str(inputs / "*.txt"), "--num-shards", "2", *FAST_RUNNER)
    failed = run_cli(*args, "--output", str(tmp_path / "failed"), expect=1)
    assert f"{inputs / 'binary.txt'}: a NUL byte (UTF-16, or not text) at byte 0 (line 1)" in failed.output
    run_cli(*args, "--output", str(out), "--allow-file-errors")
    manifest, stats, tables = read_output(out)
    assert (out / "COMPLETED").exists() and stats["reconciles"] is True
    assert {s.split for s in manifest.shards} >= {"train"}
    rows = tables["train"].to_pylist()
    by_origin = sorted((r["origin"].rsplit("/", 1)[-1], r["sentences"]) for r in rows)
    assert [s for o, s in by_origin if o == "sample_text.txt"] == sorted(docs)
    assert [s for o, s in by_origin if o == "no_blank_lines.txt"] == [
        ["One sentence.", "Another sentence.", "A third."]
    ]
    assert stats["rejected"] == {"empty": 1} and stats["file_errors"] == {"binary": 1}
    assert stats["files_without_blank_lines"] == 1 and stats["text_files"] == 4
    assert sorted(r["reason"] for r in read_rejects(out)) == ["binary", "empty"]
    # only bad files: nothing usable, one line, exit 1, never COMPLETED
    bad = tmp_path / "bad"
    result = run_cli(
        "text", "--input", str(inputs / "empty.txt"), "--output", str(bad), *FAST_RUNNER, expect=1
    )
    assert "not marked COMPLETED" in result.output and not (bad / "COMPLETED").exists()
    assert json.loads((bad / "stats.json").read_text())["rejected"] == {"empty": 1}
