"""`pipelines books` and `pipelines corpus` end to end on real Gutenberg books and the enwiki excerpt."""

from __future__ import annotations

import random
import shutil

import pytest

from tests.conftest import GUTENBERG, require
from tests.e2e.conftest import FAST_RUNNER, read_output, read_rejects, run_cli, shard_bytes

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def books_folder(tmp_path_factory):
    """Three real novels, a lightly edited copy of one (a near duplicate), an exact copy, and a binary file."""
    books = sorted(require(GUTENBERG).glob("*.txt"))[:3]
    folder = tmp_path_factory.mktemp("books")
    for book in books:
        shutil.copy(book, folder / book.name)
    shutil.copy(books[0], folder / "exact-copy.txt")
    lines = books[1].read_bytes().split(b"\n")
    rng = random.Random(0)
    for i in rng.sample(range(len(lines)), len(lines) // 100):  # edit 1% of the lines
        lines[i] = b"An edited line."
    (folder / "near-copy.txt").write_bytes(b"\n".join(lines))
    (folder / "cover.txt").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 64)
    return folder


@pytest.fixture(scope="module")
def books_output(books_folder, tmp_path_factory):
    out = tmp_path_factory.mktemp("books-out") / "out"
    run_cli(
        "books", "--input", f"{books_folder}/*.txt", "--output", str(out), "--num-shards", "2", *FAST_RUNNER
    )
    return out


def test_books_become_documents_and_the_binary_file_a_reject(books_output):
    _, stats, tables = read_output(books_output)
    assert stats["records_in"] == 6 and stats["documents_out"] == 5 and stats["reconciles"]
    assert stats["rejected"] == {"binary": 1}
    (reject,) = read_rejects(books_output)
    assert reject["origin"].endswith("cover.txt") and reject["reason"] == "binary"
    sentences = [s for doc in tables["all"].column("sentences").to_pylist() for s in doc]
    assert not any("Project Gutenberg" in s or "\n" in s for s in sentences)


def test_corpus_dedups_splits_and_reconciles(books_output, wiki_output, tmp_path):
    out = tmp_path / "all"
    run_cli(
        "corpus",
        "--input",
        str(wiki_output),
        "--input",
        str(books_output),
        "--output",
        str(out),
        "--validation-fraction",
        "0.1",
        "--test-fraction",
        "0.1",
        "--num-shards",
        "2",
        *FAST_RUNNER,
    )
    manifest, stats, tables = read_output(out)
    _, wiki_stats, _ = read_output(wiki_output)
    assert stats["records_in"] == wiki_stats["documents_out"] + 5
    assert stats["dropped"] == {"exact_duplicate": 1, "near_duplicate": 1}
    assert stats["reconciles"] and stats["documents_out"] == sum(t.num_rows for t in tables.values())
    ids = {split: set(t.column("doc_id").to_pylist()) for split, t in tables.items()}
    assert set(ids) == {"train", "validation", "test"}
    assert not (
        ids["train"] & ids["validation"] or ids["train"] & ids["test"] or ids["validation"] & ids["test"]
    )
    assert stats["splits"] == {split: len(v) for split, v in ids.items()}
    assert manifest.producer == "pipelines corpus"

    # Adding data never moves old documents: a corpus of the wiki output alone puts every
    # document in the same split as before.
    alone = tmp_path / "wiki-only"
    run_cli(
        "corpus",
        "--input",
        str(wiki_output),
        "--output",
        str(alone),
        "--validation-fraction",
        "0.1",
        "--test-fraction",
        "0.1",
        "--num-shards",
        "2",
        *FAST_RUNNER,
    )
    _, _, alone_tables = read_output(alone)
    for split, table in alone_tables.items():
        assert set(table.column("doc_id").to_pylist()) <= ids[split]


def test_corpus_is_deterministic_and_refuses_incomplete_inputs(books_output, tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    for out in (first, second):
        run_cli(
            "corpus", "--input", str(books_output), "--output", str(out), "--num-shards", "2", *FAST_RUNNER
        )
    assert shard_bytes(first) == shard_bytes(second)
    incomplete = tmp_path / "incomplete"
    shutil.copytree(books_output, incomplete)
    (incomplete / "COMPLETED").unlink()
    result = run_cli("corpus", "--input", str(incomplete), "--output", str(tmp_path / "c"), expect=1)
    assert "not a completed stage output (no COMPLETED marker)" in result.output


def test_a_damaged_input_shard_fails_the_run_and_nothing_is_marked_complete(books_output, tmp_path):
    damaged = tmp_path / "damaged"
    shutil.copytree(books_output, damaged)
    shard = sorted((damaged / "all").glob("*.arrow"))[0]
    shard.write_bytes(shard.read_bytes()[:-10])
    out = tmp_path / "out"
    result = run_cli("corpus", "--input", str(damaged), "--output", str(out), *FAST_RUNNER, expect=1)
    assert f"error: {shard}: checksum differs from its manifest" in result.output
    assert not (out / "COMPLETED").exists() and not (out / "manifest.json").exists()
