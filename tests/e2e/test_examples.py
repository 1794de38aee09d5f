"""`pipelines examples` end to end on the enwiki corpus with the released BERT vocabulary."""

from __future__ import annotations

import json

import pyarrow.dataset as ds
import pytest

from schemas.examples import examples_format
from tests.e2e.conftest import FAST_RUNNER, read_output, run_cli, shard_bytes
from wordpiece.tokenizer import WordPieceTokenizer

pytestmark = pytest.mark.slow

ARGS = ("--max-seq-length", "64", "--dupe-factor", "2", "--num-shards", "3", "--num-buckets", "4")


@pytest.fixture(scope="module")
def examples_output(corpus_output, released_vocab, tmp_path_factory):
    out = tmp_path_factory.mktemp("examples") / "out"
    run_cli(
        "examples",
        "--corpus",
        str(corpus_output),
        "--vocab",
        released_vocab,
        "--output",
        str(out),
        *ARGS,
        *FAST_RUNNER,
    )
    return out


def _rows(folder) -> list[dict]:
    return ds.dataset(str(folder / "examples"), format="ipc").to_table().to_pylist()


def test_examples_are_well_formed_and_statistics_hold(examples_output, released_vocab):
    rows = _rows(examples_output)  # read with plain pyarrow, none of our code
    stats = json.loads((examples_output / "stats.json").read_text())
    assert len(rows) == stats["examples"] > 1000
    assert stats["documents_used"] > 50 and stats["skipped"]["pairs_without_other_document"] == 0
    for row in rows:
        ids, a = row["input_ids"], row["num_tokens_a"]
        assert len(ids) == row["num_tokens"] <= 64
        assert ids[0] == 101 and ids[a - 1] == 102 and ids[-1] == 102
        assert len(row["masked_lm_positions"]) <= 20
    # n >= 10,000 predictions: a share's standard error is below 0.005, so 0.02 is four of them.
    assert abs(stats["masked_share_mask"] - 0.8) < 0.02
    assert abs(stats["masked_share_random"] - 0.1) < 0.02
    assert abs(stats["masked_share_unchanged"] - 0.1) < 0.02
    assert 0.13 < stats["mask_rate"] <= 0.16 and stats["masking"] is True
    assert 0.5 <= stats["random_next_rate"] < 0.7  # one-sentence chunks are always random next


def test_the_index_written_with_the_shards_matches_their_bytes(examples_output):
    """index.json, named and hashed by the manifest, is what walking the written shards gives."""
    from schemas import verify_completed
    from schemas.index import ShardIndex, shard_index_entry

    manifest = verify_completed(
        (examples_output / "manifest.json").read_text(),
        (examples_output / "COMPLETED").read_text(),
        str(examples_output),
        "examples",
    )
    text = (examples_output / "index.json").read_bytes()
    assert manifest.index is not None and manifest.index.num_bytes == len(text)
    index = ShardIndex.from_json(text, "index.json")
    index.check_against(manifest, "index.json")
    for entry in index.shards:
        assert entry == shard_index_entry(entry.path, (examples_output / entry.path).read_bytes())[0]
    assert index.schema.equals(examples_format(30522).schema, check_metadata=True)


def test_actual_next_pairs_come_from_one_document_in_order(examples_output, corpus_output, released_vocab):
    tokenizer = WordPieceTokenizer.load(released_vocab, cased=False)
    _, _, tables = read_output(corpus_output)
    streams = {}
    for row in tables["train"].select(["doc_id", "sentences"]).to_pylist():
        streams[row["doc_id"]] = [t for ids in tokenizer.encode_batch(row["sentences"]) for t in ids]

    def contains(haystack, needle):
        return any(haystack[i : i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1))

    checked = 0
    for row in _rows(examples_output)[:400]:
        ids = list(row["input_ids"])
        for position, original in zip(row["masked_lm_positions"], row["masked_lm_ids"], strict=True):
            ids[position] = original
        a, b = ids[1 : row["num_tokens_a"] - 1], ids[row["num_tokens_a"] : -1]
        stream = streams[row["doc_id"]]
        assert contains(stream, a)
        if row["next_sentence_labels"] == 0:
            assert contains(stream, b)
            checked += 1
    assert checked > 50


def test_two_worker_processes_write_identical_shards(
    examples_output, corpus_output, released_vocab, tmp_path
):
    out = tmp_path / "two"
    run_cli(
        "examples",
        "--corpus",
        str(corpus_output),
        "--vocab",
        released_vocab,
        "--output",
        str(out),
        *ARGS,
        "--runner",
        "DirectRunner",
        "--direct_num_workers",
        "2",
        "--direct_running_mode",
        "multi_processing",
    )
    assert shard_bytes(out) == shard_bytes(examples_output)
    png = (out / "length_histogram.png").read_bytes()
    assert (
        png.startswith(b"\x89PNG\r\n\x1a\n")
        and png == (examples_output / "length_histogram.png").read_bytes()
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "examples" and len(manifest["params"]["vocab_sha256"]) == 64
    sizes = [s["num_rows"] for s in manifest["shards"]]
    assert max(sizes) / min(sizes) < 1.15  # balanced by hashing
    fmt = examples_format(30522)
    for shard in manifest["shards"]:
        fmt.read_ipc((out / shard["path"]).read_bytes(), shard["path"])


def test_shards_are_the_same_bytes_without_spilling(examples_output, corpus_output, released_vocab, tmp_path):
    """--spill never (everything through the runner's memory, as on Dataflow) against the fixture's
    spilled run (FnApiRunner: --spill auto spills), shard by shard; no temporary folder either way."""
    out = tmp_path / "in-memory"
    args = ("--corpus", str(corpus_output), "--vocab", released_vocab, "--output", str(out))
    run_cli("examples", *args, *ARGS, "--spill", "never", *FAST_RUNNER)
    assert shard_bytes(out) == shard_bytes(examples_output)
    assert not (out / ".temp").exists() and not (examples_output / ".temp").exists()


def test_hf_datasets_reads_the_shards_without_our_code(examples_output, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import datasets

    files = sorted(str(p) for p in (examples_output / "examples").glob("*.arrow"))
    loaded = datasets.load_dataset("arrow", data_files=files, split="train", cache_dir=str(tmp_path))
    stats = json.loads((examples_output / "stats.json").read_text())
    assert loaded.num_rows == stats["examples"]
    assert set(loaded.column_names) >= {
        "input_ids",
        "masked_lm_positions",
        "masked_lm_ids",
        "next_sentence_labels",
    }


def test_a_one_document_corpus_counts_the_pairs_it_cannot_make(released_vocab, tmp_path):
    book = tmp_path / "books" / "story.txt"
    book.parent.mkdir()
    book.write_text(
        " ".join(f"This is sentence number {i} of one invented story." for i in range(400)) + "\n"
    )
    run_cli(
        "books", "--input", str(book), "--output", str(tmp_path / "docs"), "--num-shards", "1", *FAST_RUNNER
    )
    run_cli(
        "corpus",
        "--input",
        str(tmp_path / "docs"),
        "--output",
        str(tmp_path / "corpus"),
        "--validation-fraction",
        "0",
        "--test-fraction",
        "0",
        "--num-shards",
        "1",
        *FAST_RUNNER,
    )
    out = tmp_path / "examples"
    run_cli(
        "examples",
        "--corpus",
        str(tmp_path / "corpus"),
        "--vocab",
        released_vocab,
        "--output",
        str(out),
        "--num-shards",
        "1",
        "--num-buckets",
        "2",
        *FAST_RUNNER,
    )
    stats = json.loads((out / "stats.json").read_text())
    assert stats["documents_used"] == 1 and stats["skipped"]["pairs_without_other_document"] > 0
    assert stats["examples"] > 0 and stats["random_next_rate"] == 0.0


def test_no_masking_writes_the_original_pairs(examples_output, corpus_output, released_vocab, tmp_path):
    out = tmp_path / "unmasked"
    run_cli(
        "examples",
        "--corpus",
        str(corpus_output),
        "--vocab",
        released_vocab,
        "--output",
        str(out),
        *ARGS,
        "--no-masking",
        *FAST_RUNNER,
    )
    rows, masked = _rows(out), _rows(examples_output)
    assert len(rows) == len(masked) > 1000
    for row, twin in zip(rows, masked, strict=True):
        assert row["masked_lm_positions"] == [] and row["masked_lm_ids"] == []
        ids, a = row["input_ids"], row["num_tokens_a"]
        assert ids[0] == 101 and ids[a - 1] == 102 and ids[-1] == 102  # [CLS] A [SEP] B [SEP]
        assert 101 not in ids[1:] and ids.count(102) == 2 and 103 not in ids  # no [MASK] anywhere
        # The same pair as the masked run, with the masked positions restored.
        original = list(twin["input_ids"])
        for position, label in zip(twin["masked_lm_positions"], twin["masked_lm_ids"], strict=True):
            original[position] = label
        assert ids == original and a == twin["num_tokens_a"]
    stats = json.loads((out / "stats.json").read_text())
    assert stats["masking"] is False and stats["mask_rate"] == 0.0
    assert (
        stats["masked_share_mask"] is stats["masked_share_random"] is stats["masked_share_unchanged"] is None
    )
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["params"]["masking"] is False
    assert manifest["params"]["masking_settings"]["max_predictions_per_seq"] == 20  # for dynamic masking
    assert (
        json.loads((examples_output / "manifest.json").read_text())["params"]["masking"]["masked_lm_prob"]
        == 0.15
    )
    assert (out / "length_histogram.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
