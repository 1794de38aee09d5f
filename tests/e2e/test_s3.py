"""``s3://`` end to end against a local S3 server (moto, started by the fixture): `pipelines text`,
`wordpiece train` and `pipelines examples` read and write the bucket through Beam's S3 filesystem
(`pipelines show` reads it back), `pretrain` streams the shards from there and writes its run
there, resumes it from there, and `pretrain export` reads it back.
"""

from __future__ import annotations

import json

import fsspec
import pytest
from click.testing import CliRunner

from pretrain.cli import main as pretrain_main
from tests.conftest import SHARED_DATA, require
from tests.e2e.conftest import FAST_RUNNER, run_cli, run_wordpiece

pytestmark = [pytest.mark.slow, pytest.mark.s3]

CORPUS = "s3://bert-bucket/corpus"
VOCAB = "s3://bert-bucket/vocab"
SHARDS = "s3://bert-bucket/shards/seq64"
RUN = "s3://bert-bucket/runs/tiny"


def _pretrain(*args: str) -> str:
    result = CliRunner().invoke(pretrain_main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_every_stage_on_s3(s3_server, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a bucket path mistaken for a local one shows up as ./s3:
    text = require(SHARED_DATA / "books" / "bert_sample_text.txt")
    run_cli("text", "--input", str(text), "--output", CORPUS, "--num-shards", "1", *FAST_RUNNER)
    assert "pipelines text" in run_cli("show", CORPUS).output
    run_wordpiece(
        "train",
        "--corpus",
        CORPUS,
        "--output",
        VOCAB,
        "--vocab-size",
        "400",
        "--num-unused",
        "0",
        "--num-count-shards",
        "1",
        *FAST_RUNNER,
    )
    vocab = f"{VOCAB}/vocab.txt"
    run_cli(
        "examples",
        "--corpus",
        CORPUS,
        "--vocab",
        vocab,
        "--output",
        SHARDS,
        "--max-seq-length",
        "64",
        "--dupe-factor",
        "5",
        "--num-shards",
        "2",
        "--num-buckets",
        "2",
        *FAST_RUNNER,
    )
    fs = fsspec.filesystem("s3")
    names = set(fs.find("bert-bucket"))
    assert {
        "bert-bucket/corpus/COMPLETED",
        "bert-bucket/vocab/COMPLETED",
        "bert-bucket/vocab/vocab.txt",
        "bert-bucket/shards/seq64/COMPLETED",
        "bert-bucket/shards/seq64/examples/part-00001-of-00002.arrow",
    } <= names
    assert not any(".write-probe-" in name for name in names)

    common = [
        "--shards",
        SHARDS,
        "--vocab",
        vocab,
        "--global-batch-size",
        "8",
        "--precision",
        "fp32",
        "--num-workers",
        "0",
        "--save-steps",
        "3",
        "--log-steps",
        "3",
        "--quiet",
    ]
    _pretrain(*common, "--config", "tiny", "--output", RUN, "--max-steps", "3")
    names = set(fs.find(RUN))
    run = RUN[5:]
    assert {
        f"{run}/checkpoints/step-00000003/COMMITTED",
        f"{run}/checkpoints/step-00000003/model.safetensors",
        f"{run}/metrics.jsonl",
    } <= names
    assert any("/tensorboard/events.out.tfevents" in name for name in names)
    _pretrain(*common, "--resume", RUN, "--max-steps", "6")
    steps = [json.loads(line)["step"] for line in fs.cat_file(f"{run}/metrics.jsonl").decode().splitlines()]
    assert steps == [3, 6]

    out = tmp_path / "hf"
    output = _pretrain("export", "--checkpoint", RUN, "--output", str(out))
    assert "step 6" in output
    assert {"config.json", "model.safetensors", "vocab.txt"} <= {p.name for p in out.iterdir()}
    assert [p.name for p in tmp_path.iterdir()] == ["hf"]  # nothing else written locally
