"""`pipelines documents` end to end on the five layouts of tests/layouts.py (built from the real
enwiki excerpt and Gutenberg novels): each a COMPLETED output holding exactly the input's documents
and sentences, the same bytes with one and two worker processes, taken by `pipelines corpus`,
`wordpiece train` and `pipelines examples`."""

from __future__ import annotations

import dataclasses
import gzip
import json

import pytest

from pipelines.config import DocumentsConfig
from pipelines.documents.pipeline import group_outcome, record_outcome
from pipelines.documents.read import Record
from tests.conftest import ENWIKI_EXCERPT, GUTENBERG, require
from tests.e2e.conftest import FAST_RUNNER, read_output, run_cli, run_wordpiece, shard_bytes
from tests.layouts import GROUP_ROWS, LAYOUTS, build_layouts

pytestmark = pytest.mark.slow
TWO_WORKERS = [
    "--runner",
    "DirectRunner",
    "--direct_num_workers",
    "2",
    "--direct_running_mode",
    "multi_processing",
]


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    books = sorted(require(GUTENBERG).glob("*.txt"))
    return build_layouts(tmp_path_factory.mktemp("layouts"), require(ENWIKI_EXCERPT), books)


def _args(layout, output, *extra: str) -> list[str]:
    inputs = [a for path in layout.inputs for a in ("--input", path)]
    return ["documents", *inputs, *layout.flags, "--output", str(output), "--num-shards", "2", *extra]


@pytest.fixture(scope="module")
def outputs(layouts, tmp_path_factory):
    root = tmp_path_factory.mktemp("documents")
    for name, layout in layouts.items():
        run_cli(*_args(layout, root / name, *FAST_RUNNER))
    return root


def _config(layout) -> DocumentsConfig:
    flags = dict(zip(layout.flags[0::2], layout.flags[1::2], strict=True))
    fields = {flag.removeprefix("--").replace("-", "_"): value for flag, value in flags.items()}
    if "group_rows" in fields:
        fields["group_rows"] = int(fields["group_rows"])
    return DocumentsConfig(inputs=tuple(layout.inputs), output="out", **fields)


def _expected(layout) -> tuple[int, list[tuple[str, list[str]]]]:
    """The records the input holds and the documents they make, by the stage's pure functions."""
    config = _config(layout)
    if config.group_rows:
        half = len(layout.rows) // 2
        outcomes = []
        for file_rows in (layout.rows[:half], layout.rows[half:]):
            for start in range(0, len(file_rows), GROUP_ROWS):
                members = [
                    ("f", i, r["text"], None) for i, r in enumerate(file_rows[start : start + GROUP_ROWS])
                ]
                outcomes.append(group_outcome("key", members, config))
    else:
        fields = config.fields()
        outcomes = [
            record_outcome(Record("f", i, "n", {k: row.get(k) for k in fields}), config)
            for i, row in enumerate(layout.rows)
        ]
    documents = sorted((o.row["doc_id"], o.row["sentences"]) for o in outcomes if o.kind == "document")
    return len(outcomes), documents


@pytest.mark.parametrize("name", LAYOUTS)
def test_each_layout_is_a_completed_output_of_exactly_its_input(layouts, outputs, name):
    manifest, stats, tables = read_output(outputs / name)
    assert (outputs / name / "COMPLETED").exists() and manifest.producer == "pipelines documents"
    num_records, documents = _expected(layouts[name])
    assert stats["records_in"] == num_records and stats["reconciles"]
    assert stats["rejected"] == {} and stats["file_errors"] == {}
    rows = tables["all"].to_pylist()
    assert sorted((r["doc_id"], r["sentences"]) for r in rows) == documents
    assert stats["documents_out"] == len(documents) and stats["sentences"] == sum(
        len(s) for _, s in documents
    )
    assert sorted({r["origin"] for r in rows}) == sorted(str(f) for f in layouts[name].files)
    if name == "bookcorpus":  # every sentence row is in exactly one document, in its file's order
        assert stats["sentences"] == stats["grouped_rows"] == len(layouts[name].rows)
        assert manifest.params["group_rows"] == GROUP_ROWS
    if name == "wikipedia":
        by_id = {int(r["id"]): r["title"] for r in layouts[name].rows}
        assert all(by_id[r["page_id"]] == r["title"] for r in rows)
        assert not any(s in ("History", "Early life") for r in rows for s in r["sentences"])  # headings


def test_a_book_a_row_gives_the_documents_pipelines_books_gives(layouts, outputs, tmp_path):
    books = sorted(require(GUTENBERG).glob("*.txt"))[:4]  # the bookcorpusopen layout's
    for book in books:
        (tmp_path / book.name).write_bytes(book.read_bytes())
    run_cli("books", "--input", str(tmp_path / "*.txt"), "--output", str(tmp_path / "books"), *FAST_RUNNER)
    _, _, ours = read_output(outputs / "bookcorpusopen")
    _, _, theirs = read_output(tmp_path / "books")
    documents = [
        sorted(zip(t["all"]["doc_id"].to_pylist(), t["all"]["sentences"].to_pylist(), strict=True))
        for t in (ours, theirs)
    ]
    assert documents[0] == documents[1] and len(documents[0]) == 4


@pytest.mark.parametrize("name", LAYOUTS)
def test_one_and_two_worker_processes_write_identical_bytes(layouts, outputs, name, tmp_path):
    run_cli(*_args(layouts[name], tmp_path / "two", *TWO_WORKERS))
    assert shard_bytes(tmp_path / "two") == shard_bytes(outputs / name)
    for file in ("manifest.json", "stats.json"):
        assert (tmp_path / "two" / file).read_text() == (outputs / name / file).read_text()


def test_plain_json_lines_read_by_byte_range_give_the_compressed_files_documents(layouts, outputs, tmp_path):
    for path in layouts["dolma"].files:
        (tmp_path / path.name.removesuffix(".gz")).write_bytes(gzip.decompress(path.read_bytes()))
    dolma = layouts["dolma"]
    plain = dataclasses.replace(dolma, inputs=[str(tmp_path / "*.json")])
    run_cli(*_args(plain, tmp_path / "out", "--bytes-per-read", "20000", *FAST_RUNNER))
    manifest, stats, plain = read_output(tmp_path / "out")
    _, gz_stats, compressed = read_output(outputs / "dolma")
    columns = ["doc_id", "title", "page_id", "sentences"]
    assert plain["all"].select(columns).to_pylist() == compressed["all"].select(columns).to_pylist()
    assert stats["records_in"] == gz_stats["records_in"] and manifest.params["bytes_per_read"] == 20000
    size = sum(p.stat().st_size for p in tmp_path.glob("*.json"))
    assert size > 5 * 20000  # so read in many ranges


def test_the_layouts_feed_corpus_wordpiece_and_examples(layouts, outputs, tmp_path):
    inputs = [a for name in LAYOUTS for a in ("--input", str(outputs / name))]
    corpus = tmp_path / "corpus"
    run_cli(
        "corpus",
        *inputs,
        "--output",
        str(corpus),
        "--validation-fraction",
        "0.1",
        "--test-fraction",
        "0.1",
        "--num-shards",
        "2",
        *FAST_RUNNER,
    )
    _, stats, tables = read_output(corpus)
    written = [json.loads((outputs / name / "stats.json").read_text())["documents_out"] for name in LAYOUTS]
    assert stats["records_in"] == sum(written) and stats["reconciles"]
    layout_of = {str(f): name for name, layout in layouts.items() for f in layout.files}
    assert {layout_of[o] for o in tables["train"].column("origin").to_pylist()} == set(LAYOUTS)
    vocab = tmp_path / "vocab"
    run_wordpiece(
        "train",
        "--corpus",
        str(corpus),
        "--output",
        str(vocab),
        "--vocab-size",
        "3000",
        "--num-unused",
        "10",
        "--num-count-shards",
        "2",
        *FAST_RUNNER,
    )
    assert (vocab / "COMPLETED").exists()
    examples = tmp_path / "examples"
    run_cli(
        "examples",
        "--corpus",
        str(corpus),
        "--vocab",
        str(vocab / "vocab.txt"),
        "--output",
        str(examples),
        "--max-seq-length",
        "64",
        "--dupe-factor",
        "1",
        "--num-shards",
        "2",
        "--num-buckets",
        "4",
        *FAST_RUNNER,
    )
    examples_stats = json.loads((examples / "stats.json").read_text())
    assert (examples / "COMPLETED").exists() and examples_stats["examples"] > 1000
