"""Every `finetune` task with its data, checkpoint and output on a bucket: `gs://` against the local
GCS emulator, `s3://` against a local S3 server (moto). A tiny BERT (2 layers, 32 wide, the
released uncased vocabulary) on a few real rows of each task: the paths work, not a learning check.
"""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import pytest
from click.testing import CliRunner

from finetune.cli import main
from schemas import storage
from tests.conftest import SHARED_DATA, require

pytestmark = pytest.mark.slow

SCHEMES = [pytest.param("gs", marks=pytest.mark.emulator), pytest.param("s3", marks=pytest.mark.s3)]
QUICK = ["--epochs", "1", "--batch-size", "4", "--lr", "1e-4", "--precision", "fp32", "--device", "cpu"]


@pytest.fixture(params=SCHEMES)
def bucket(request, tmp_path, monkeypatch) -> str:
    """``gs://bert-bucket`` or ``s3://bert-bucket`` on its local server, holding ``bert/``: a tiny
    HF-format BERT written there by ``pretrain.hf.export_hf``. The test runs in an empty folder, so
    that a path mistaken for a local one shows up as a stray folder."""
    from pretrain import hf
    from pretrain.model import BertConfig, BertForPreTraining

    request.getfixturevalue("gcs_emulator" if request.param == "gs" else "s3_server")
    vocab = require(SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt")
    config = BertConfig(
        vocab_size=len(vocab.read_text(encoding="utf-8").splitlines()),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
    )
    url = f"{request.param}://bert-bucket"
    hf.export_hf(BertForPreTraining(config, seed=0), storage.Folder(f"{url}/bert"), vocab)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    yield url
    assert not list(work.iterdir()), "a bucket path was written as a local folder"


def _put_lines(url: str, source: Path, num_lines: int | None = None) -> None:
    """Copy ``source`` (its first ``num_lines`` lines) to ``url``."""
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    fsspec.filesystem(url.split("://")[0]).pipe_file(url, "".join(lines[:num_lines]).encode("utf-8"))


def _finetune(*args: str) -> None:
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output


def _outputs(url: str) -> dict[str, bytes]:
    fs, root = fsspec.core.url_to_fs(url)
    return {name.removeprefix(root.rstrip("/") + "/"): fs.cat_file(name) for name in fs.find(root)}


def test_glue_on_a_bucket(bucket):
    cola = require(SHARED_DATA / "glue" / "CoLA")
    for name in ("train.tsv", "dev.tsv", "test.tsv"):
        _put_lines(f"{bucket}/glue/CoLA/{name}", cola / name, 25)
    _finetune(
        "glue",
        "--task",
        "cola",
        "--data-dir",
        f"{bucket}/glue/CoLA",
        "--checkpoint",
        f"{bucket}/bert",
        "--output",
        f"{bucket}/ft/cola",
        "--max-seq-length",
        "32",
        *QUICK,
    )
    outputs = _outputs(f"{bucket}/ft/cola")
    metrics = json.loads(outputs["metrics.json"])
    assert metrics["num_examples"] == {"train": 25, "dev": 25}
    assert "mcc" in metrics["dev"]
    lines = {name: len(outputs[name].decode().splitlines()) for name in ("CoLA.tsv", "dev_predictions.tsv")}
    assert lines == {"CoLA.tsv": 1 + 24, "dev_predictions.tsv": 1 + 25}  # the GLUE server's test layout


def test_squad_on_a_bucket(bucket):
    squad = require(SHARED_DATA / "squad" / "allennlp-models_test_fixtures_squad.json")
    data = f"{bucket}/squad/dev-v1.1.json"
    _put_lines(data, squad)
    window = ["--max-seq-length", "96", "--doc-stride", "48", "--max-query-length", "24"]
    _finetune(
        "squad",
        "--version",
        "1.1",
        "--train-file",
        data,
        "--predict-file",
        data,
        "--checkpoint",
        f"{bucket}/bert",
        "--output",
        f"{bucket}/ft/squad",
        *window,
        *QUICK,
    )
    outputs = _outputs(f"{bucket}/ft/squad")
    assert {
        "metrics.json",
        "predictions.json",
        "nbest_predictions.json",
        "model/model.safetensors",
        "model/config.json",
        "model/vocab.txt",
        "model/tokenizer_config.json",
    } <= set(outputs)
    metrics = json.loads(outputs["metrics.json"])
    assert metrics["span_head"] == "fresh" and metrics["train"]["steps"] >= 1
    # The model saved on the bucket restores the span head: predicting from it repeats the answers.
    _finetune(
        "squad",
        "--version",
        "1.1",
        "--predict-file",
        data,
        "--checkpoint",
        f"{bucket}/ft/squad/model",
        "--output",
        f"{bucket}/ft/again",
        *window,
        *QUICK,
    )
    again = _outputs(f"{bucket}/ft/again")
    assert json.loads(again["metrics.json"])["span_head"] == "from the checkpoint"
    assert json.loads(again["predictions.json"]) == json.loads(outputs["predictions.json"])


def test_swag_on_a_bucket(bucket):
    regular = require(SHARED_DATA / "swag" / "hf_dummy" / "regular")
    for name in ("train.csv", "val.csv", "test.csv"):
        _put_lines(f"{bucket}/swag/{name}", regular / name)
    _finetune(
        "swag",
        "--data-dir",
        f"{bucket}/swag",
        "--checkpoint",
        f"{bucket}/bert",
        "--output",
        f"{bucket}/ft/swag",
        "--max-seq-length",
        "48",
        *QUICK,
    )
    outputs = _outputs(f"{bucket}/ft/swag")
    metrics = json.loads(outputs["metrics.json"])
    assert metrics["files"] == ["dev_predictions.csv", "test_predictions.csv"]
    num_dev = metrics["num_examples"]["dev"]
    assert num_dev > 0 and len(outputs["dev_predictions.csv"].decode().splitlines()) == num_dev + 1


def test_ner_on_a_bucket(bucket):
    conll = require(SHARED_DATA / "ner" / "conll2003")
    for name in ("train.txt", "valid.txt"):
        _put_lines(f"{bucket}/conll/{name}", conll / name, 200)
    _finetune(
        "ner",
        "--data-dir",
        f"{bucket}/conll",
        "--checkpoint",
        f"{bucket}/bert",
        "--output",
        f"{bucket}/ft/ner",
        "--max-seq-length",
        "48",
        *QUICK,
    )
    outputs = _outputs(f"{bucket}/ft/ner")
    metrics = json.loads(outputs["metrics.json"])
    assert 0.0 <= metrics["valid"]["f1"] <= 1.0
    sentences = [s for s in outputs["valid_predictions.txt"].decode().split("\n\n") if s.strip()]
    assert len(sentences) == metrics["num_examples"]["valid"] > 0
