"""``s3://`` end to end against a local S3 server (moto, started by the fixture): `pipelines
examples` writes its shards to the bucket through Beam's S3 filesystem, `pretrain` streams them
from there and writes its run there, resumes it from there, and `pretrain export` reads it back.
"""

from __future__ import annotations

import json

import fsspec
import pytest
from click.testing import CliRunner

from pretrain.cli import main as pretrain_main
from tests.conftest import SHARED_DATA, require
from tests.e2e.conftest import FAST_RUNNER, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.s3]

SHARDS = "s3://bert-bucket/shards/seq64"
RUN = "s3://bert-bucket/runs/tiny"


def _pretrain(*args: str) -> str:
    result = CliRunner().invoke(pretrain_main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_examples_pretrain_and_export_on_s3(s3_server, tmp_path):
    text = require(SHARED_DATA / "books" / "bert_sample_text.txt")
    vocab = str(require(SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt"))
    corpus = tmp_path / "corpus"
    run_cli("text", "--input", str(text), "--output", str(corpus), "--num-shards", "1", *FAST_RUNNER)
    run_cli(
        "examples", "--corpus", str(corpus), "--vocab", vocab, "--output", SHARDS, "--max-seq-length", "64",
        "--dupe-factor", "5", "--num-shards", "2", "--num-buckets", "2", *FAST_RUNNER,
    )  # fmt: skip
    fs = fsspec.filesystem("s3")
    assert {f"{SHARDS[5:]}/COMPLETED", f"{SHARDS[5:]}/examples/part-00001-of-00002.arrow"} <= set(
        fs.find(SHARDS)
    )
    assert not (tmp_path / "s3:").exists()

    common = ["--shards", SHARDS, "--vocab", vocab, "--global-batch-size", "8", "--precision", "fp32",
              "--num-workers", "0", "--save-steps", "3", "--log-steps", "3", "--quiet"]  # fmt: skip
    _pretrain(*common, "--config", "tiny", "--output", RUN, "--max-steps", "3")
    names = set(fs.find(RUN))
    run = RUN[5:]
    assert {f"{run}/checkpoints/step-00000003/COMMITTED", f"{run}/checkpoints/step-00000003/model.safetensors",
            f"{run}/metrics.jsonl"} <= names  # fmt: skip
    assert any("/tensorboard/events.out.tfevents" in name for name in names)
    _pretrain(*common, "--resume", RUN, "--max-steps", "6")
    steps = [json.loads(line)["step"] for line in fs.cat_file(f"{run}/metrics.jsonl").decode().splitlines()]
    assert steps == [3, 6]

    out = tmp_path / "hf"
    output = _pretrain("export", "--checkpoint", RUN, "--output", str(out))
    assert "step 6" in output
    assert {"config.json", "model.safetensors", "vocab.txt"} <= {p.name for p in out.iterdir()}
