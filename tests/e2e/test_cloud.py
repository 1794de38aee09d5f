"""Bucket paths and Dataflow: every pipeline builds as a Dataflow job, and runs against a local GCS emulator."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import ENWIKI_EXCERPT, GUTENBERG, require
from tests.e2e.conftest import FAST_RUNNER, run_cli, run_wordpiece
from tests.multistream import build_multistream

pytestmark = pytest.mark.slow

DATAFLOW_DRY_RUN = [
    "--runner",
    "DataflowRunner",
    "--project",
    "bert-project",
    "--region",
    "us-central1",
    "--temp_location",
    "gs://bert-bucket/tmp",
    "--dry_run=True",
    "--setup_file",
    str(Path(__file__).resolve().parents[2] / "setup.py"),
]


def _upload_folder(bucket, folder: Path, prefix: str) -> str:
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        bucket.blob(f"{prefix}/{path.relative_to(folder)}").upload_from_filename(str(path))
    return f"gs://bert-bucket/{prefix}"


@pytest.mark.emulator
def test_every_stage_builds_as_a_dataflow_job_and_writes_nothing(
    gcs_emulator, wiki_output, corpus_output, released_vocab
):
    """With every path on a bucket, each stage (the spilling examples graph included) is checked,
    built and pickled for Dataflow; a dry run submits nothing and writes nothing."""
    gcs_emulator.blob(f"dumps/{ENWIKI_EXCERPT.name}").upload_from_filename(str(require(ENWIKI_EXCERPT)))
    for book in sorted(require(GUTENBERG).glob("*.txt"))[:2]:
        gcs_emulator.blob(f"books/{book.name}").upload_from_filename(str(book))
    wiki, corpus = (
        _upload_folder(gcs_emulator, wiki_output, "wiki"),
        _upload_folder(gcs_emulator, corpus_output, "all"),
    )
    before = {blob.name for blob in gcs_emulator.client.list_blobs("bert-bucket")}
    out = "gs://bert-bucket/out"
    for args in (
        ["wikipedia", "--input", "gs://bert-bucket/dumps/*.bz2", "--output", f"{out}/wiki"],
        ["books", "--input", "gs://bert-bucket/books/*.txt", "--output", f"{out}/books"],
        ["corpus", "--input", wiki, "--output", f"{out}/corpus"],
        [
            "examples",
            "--corpus",
            corpus,
            "--vocab",
            released_vocab,
            "--output",
            f"{out}/ex",
            "--spill",
            "always",
        ],
    ):
        assert "dry run: the job was built and not submitted" in run_cli(*args, *DATAFLOW_DRY_RUN).output
    result = run_wordpiece("train", "--corpus", corpus, "--output", f"{out}/vocab", *DATAFLOW_DRY_RUN)
    assert "dry run: the counting job was built and not submitted" in result.output
    assert {blob.name for blob in gcs_emulator.client.list_blobs("bert-bucket")} == before


@pytest.mark.emulator
def test_wikipedia_corpus_and_vocabulary_on_bucket_paths(gcs_emulator, tmp_path):
    assert os.environ["STORAGE_EMULATOR_HOST"]
    dump, index = build_multistream(require(ENWIKI_EXCERPT), tmp_path, pages_per_stream=50)
    for path in (dump, index):
        gcs_emulator.blob(f"dumps/{path.name}").upload_from_filename(str(path))
    run_cli(
        "wikipedia",
        "--input",
        "gs://bert-bucket/dumps/*-multistream.xml.bz2",
        "--output",
        "gs://bert-bucket/corpus/wiki",
        "--num-shards",
        "2",
        *FAST_RUNNER,
    )
    run_cli(
        "corpus",
        "--input",
        "gs://bert-bucket/corpus/wiki",
        "--output",
        "gs://bert-bucket/corpus/all",
        "--num-shards",
        "2",
        *FAST_RUNNER,
    )
    names = {blob.name for blob in gcs_emulator.client.list_blobs("bert-bucket")}
    assert {
        "corpus/wiki/COMPLETED",
        "corpus/all/COMPLETED",
        "corpus/all/train/part-00000-of-00002.arrow",
    } <= names
    result = run_cli("show", "gs://bert-bucket/corpus/all")
    assert "pipelines corpus" in result.output
    run_wordpiece(
        "train",
        "--corpus",
        "gs://bert-bucket/corpus/all",
        "--output",
        "gs://bert-bucket/vocab",
        "--vocab-size",
        "3000",
        "--num-unused",
        "10",
        "--num-count-shards",
        "2",
        *FAST_RUNNER,
    )
    names = {blob.name for blob in gcs_emulator.client.list_blobs("bert-bucket")}
    assert {"vocab/vocab.txt", "vocab/tokenizer.json", "vocab/stats.json", "vocab/COMPLETED"} <= names
    # examples to the bucket, then streamed back by the trainer's reader (gcsfs finds the
    # emulator through STORAGE_EMULATOR_HOST), in one process and with two DataLoader workers
    run_cli(
        "examples",
        "--corpus",
        "gs://bert-bucket/corpus/all",
        "--vocab",
        "gs://bert-bucket/vocab/vocab.txt",
        "--output",
        "gs://bert-bucket/shards/seq64",
        "--max-seq-length",
        "64",
        "--dupe-factor",
        "1",
        "--num-shards",
        "3",
        "--num-buckets",
        "4",
        *FAST_RUNNER,
    )
    names = {blob.name for blob in gcs_emulator.client.list_blobs("bert-bucket")}
    assert {
        "shards/seq64/COMPLETED",
        "shards/seq64/examples/part-00002-of-00003.arrow",
        "shards/seq64/vocab.txt",  # the shards carry their vocabulary
    } <= names
    copy = gcs_emulator.blob("shards/seq64/vocab.txt").download_as_bytes()
    assert copy == gcs_emulator.blob("vocab/vocab.txt").download_as_bytes()
    assert not [n for n in names if "/.temp/" in n]  # spilled there (a local runner), then removed
    _stream_examples_from_bucket(gcs_emulator)


def _stream_examples_from_bucket(bucket) -> None:
    import torch

    from pretrain.data import ExampleShards
    from wordpiece.tokenizer import WordPieceTokenizer

    vocab = WordPieceTokenizer.load("gs://bert-bucket/vocab/vocab.txt", cased=False)
    url = "gs://bert-bucket/shards/seq64"
    ds = ExampleShards(url, batch_size=8, seed=1, streams=2, vocab_sha256=vocab.vocab_sha256)
    local = list(ds)
    assert len(local) == len(ds) > 0
    assert len(local) * 8 == ds.world_size * ds.streams * ds.stream_rows
    for batch in local:
        assert batch["input_ids"].shape[1] <= 64
        assert int(batch["input_ids"].max()) < vocab.vocab_size
    loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)
    assert [b["input_ids"].tolist() for b in loader] == [b["input_ids"].tolist() for b in local]
