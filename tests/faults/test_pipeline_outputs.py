"""Fault tests for corpus stages: empty inputs, failed runs and COMPLETED.

One rule for every stage (docs/reliability.md): a run with no documents or examples, or with an
input file that ended early, leaves ``stats.json`` to explain itself but no manifest and no
``COMPLETED``, prints one line and exits 1; every consumer refuses such an output in one line.
Tiny made-up books and vocabulary, FnApiRunner: a few seconds in all.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from tests.e2e.conftest import FAST_RUNNER, run_cli

WORDS = (
    "the a river stone walked quietly over bright green hills under morning light while birds sang".split()
)


def write_books(folder: Path, count: int = 3) -> Path:
    """``count`` made-up books of 30 sentences each; returns their folder."""
    rng = random.Random(0)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        paragraphs = [
            " ".join(" ".join(rng.choice(WORDS) for _ in range(12)).capitalize() + "." for _ in range(5))
            for _ in range(6)
        ]
        (folder / f"book{i}.txt").write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    return folder


def write_vocab(path: Path) -> Path:
    """A WordPiece vocabulary covering ``WORDS``."""
    path.write_text(
        "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", *sorted(set(WORDS))]) + "\n"
    )
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A completed corpus whose documents all went to train (validation and test are empty)."""
    root = tmp_path_factory.mktemp("tiny")
    books = write_books(root / "books")
    run_cli(
        "books",
        "--input",
        f"{books}/*.txt",
        "--output",
        str(root / "docs"),
        "--num-shards",
        "1",
        *FAST_RUNNER,
    )
    out = root / "corpus"
    run_cli(
        "corpus",
        "--input",
        str(root / "docs"),
        "--output",
        str(out),
        "--test-fraction",
        "0",
        "--validation-fraction",
        "0",
        "--num-shards",
        "1",
        *FAST_RUNNER,
    )
    return out


def _examples(corpus: Path, vocab: Path, output: Path, split: str, expect: int, *extra: str):
    return run_cli(
        "examples",
        "--corpus",
        str(corpus),
        "--vocab",
        str(vocab),
        "--output",
        str(output),
        "--split",
        split,
        "--num-shards",
        "1",
        "--num-buckets",
        "4",
        *extra,
        *FAST_RUNNER,
        expect=expect,
    )


def test_an_empty_split_is_one_line_and_no_completed(corpus, tmp_path, monkeypatch):
    vocab = write_vocab(tmp_path / "vocab.txt")
    out = tmp_path / "examples"
    result = _examples(corpus, vocab, out, "test", expect=1)
    assert result.output.strip().splitlines() == [
        f"error: --split test of {corpus}: no examples (0 documents with tokens); {out} is not marked COMPLETED"
    ]
    assert not (out / "COMPLETED").exists() and not (out / "manifest.json").exists()
    assert json.loads((out / "stats.json").read_text())["examples"] == 0
    # The failed run's folder is refused as it is, and replaced with --overwrite; given relative
    # paths, the manifest records them absolute (pretrain may start elsewhere).
    before = sorted(p.name for p in out.rglob("*"))
    refused = _examples(corpus, vocab, out, "train", expect=1)
    assert "holds the 2 file(s) of an earlier `pipelines examples` run" in refused.output
    assert "pass --overwrite to replace them (only them)" in refused.output
    assert sorted(p.name for p in out.rglob("*")) == before
    monkeypatch.chdir(tmp_path)
    _examples(corpus, Path("vocab.txt"), Path("examples"), "train", 0, "--overwrite")
    assert (out / "COMPLETED").exists()
    params = json.loads((out / "manifest.json").read_text())["params"]
    assert params["vocab"] == str(vocab) and params["corpus"] == str(corpus)
    docs = json.loads((corpus.parent / "docs" / "manifest.json").read_text())["params"]
    assert docs["inputs"] == [f"{corpus.parent}/books/*.txt"]


def test_books_with_no_documents_are_not_completed_and_corpus_refuses_them(tmp_path):
    books = tmp_path / "books"
    books.mkdir()
    (books / "empty.txt").write_text("\n\n   \n", encoding="utf-8")
    out = tmp_path / "docs"
    result = run_cli("books", "--input", f"{books}/*.txt", "--output", str(out), *FAST_RUNNER, expect=1)
    assert "not marked COMPLETED: no documents written" in result.output
    assert not (out / "COMPLETED").exists()
    refused = run_cli("corpus", "--input", str(out), "--output", str(tmp_path / "corpus"), expect=1)
    assert refused.output.count("\n") == 1 and "no COMPLETED marker" in refused.output


def test_a_book_with_one_bad_byte_is_kept_and_the_replacement_counted(tmp_path):
    books = write_books(tmp_path / "books", count=1)
    good = (books / "book0.txt").read_bytes()
    (books / "book0.txt").write_bytes(b"\xef\xbb\xbf" + good[:500] + b"\xff" + good[500:])
    out = tmp_path / "docs"
    run_cli("books", "--input", f"{books}/*.txt", "--output", str(out), "--num-shards", "1", *FAST_RUNNER)
    stats = json.loads((out / "stats.json").read_text())
    assert stats["documents_out"] == 1 and stats["rejected"] == {}
    assert stats["replaced_characters"] == 1 and stats["books_with_replacements"] == 1


def test_an_existing_output_is_refused_and_left_as_it_was(corpus, tmp_path):
    out = tmp_path / "docs"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    books = write_books(tmp_path / "books", count=1)
    args = ("books", "--input", f"{books}/*.txt", "--output", str(out), *FAST_RUNNER)
    refused = run_cli(*args, expect=1)
    assert refused.output.strip().splitlines() == [
        f"error: --output {out}: holds 1 file(s) that no `pipelines books` run recorded writing (notes.txt); "
        "they are never deleted, even with --overwrite: choose an empty folder, or move them away"
    ]
    forced = run_cli(*args, "--overwrite", expect=1)
    assert forced.output == refused.output
    assert [p.name for p in out.iterdir()] == ["notes.txt"]
    # A completed output is refused by name, and kept byte for byte.
    before = {p: p.read_bytes() for p in corpus.rglob("*") if p.is_file()}
    again = run_cli("corpus", "--input", str(corpus.parent / "docs"), "--output", str(corpus), expect=1)
    assert "of a completed `pipelines corpus` run" in again.output and "pass --overwrite" in again.output
    assert {p: p.read_bytes() for p in corpus.rglob("*") if p.is_file()} == before


def test_show_on_a_corrupt_shard_is_one_line(corpus, tmp_path):
    import shutil

    damaged = tmp_path / "damaged"
    shutil.copytree(corpus, damaged)
    shard = next((damaged / "train").glob("*.arrow"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    run_cli("show", str(corpus))  # the intact original still shows (exit 0)
    result = run_cli("show", str(damaged), expect=1)
    assert result.output.strip().splitlines() == [
        f"error: {shard}: checksum differs from its manifest; the input was modified or damaged"
    ]


def test_manifests_record_what_they_read_by_hash(corpus):
    import hashlib

    docs = corpus.parent / "docs"
    recorded = json.loads((docs / "manifest.json").read_text())["params"]["input_files"]
    books = sorted((corpus.parent / "books").glob("*.txt"))
    assert recorded == [
        {"path": str(p), "bytes": p.stat().st_size, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
        for p in books
    ]
    upstream = json.loads((corpus / "manifest.json").read_text())["params"]["input_manifests"]
    assert upstream == [{"path": str(docs), "manifest_sha256": (docs / "COMPLETED").read_text().strip()}]


def _wordpiece(*args: str, expect: int):
    from click.testing import CliRunner

    from wordpiece.cli import main

    result = CliRunner().invoke(main, ["train", *args, *FAST_RUNNER], catch_exceptions=False)
    assert result.exit_code == expect, result.output
    return result


def test_wordpiece_train_leaves_no_counts_when_it_fails_and_keeps_foreign_files(corpus, tmp_path):
    out = tmp_path / "vocab"
    failed = _wordpiece("--corpus", str(corpus), "--output", str(out), "--split", "test", expect=1)
    assert "has no words" in failed.output and failed.output.count("\n") == 1
    assert not (out / "COMPLETED").exists() and not list(out.rglob("word_counts/*"))
    (out / "notes.txt").write_text("mine")
    forced = _wordpiece("--corpus", str(corpus), "--output", str(out), "--overwrite", expect=1)
    assert "1 file(s) that no `wordpiece train` run recorded writing (notes.txt)" in forced.output
    assert (out / "notes.txt").read_text() == "mine"
