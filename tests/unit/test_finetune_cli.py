"""The `finetune` commands in-process: GLUE on the real layout samples with a tiny model made in
code (outputs and the GLUE server's layout, not learning), errors, SQuAD scoring, the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from finetune.cli import main
from tests.conftest import SHARED_DATA, require, save_tiny_bert
from tests.unit.test_finetune_common import VOCAB, tiny_model

SAMPLES = SHARED_DATA / "glue_format_samples"
QUICK = ["--epochs", "1", "--batch-size", "2", "--max-seq-length", "32", "--lr", "1e-3"]


@pytest.fixture(scope="module")
def bert_uncased_folder(tmp_path_factory) -> str:
    """A tiny random BERT over the released uncased vocabulary (real text tokenises)."""
    return str(save_tiny_bert(tmp_path_factory.mktemp("bert")))


def run(*args: str, expect: int = 0):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == expect, result.output
    return result


@pytest.mark.parametrize(
    "command", ["", "glue", "swag", "squad", "ner", "features", "evaluate", "evaluate squad", "report"]
)
def test_each_help_fits_a_screen_and_ends_with_its_doc(command):
    lines = run(*command.split(), "--help").output.rstrip().splitlines()
    assert lines[0].startswith("Usage:") and len(lines) <= 40
    assert lines[-1].strip() == "Examples and every flag: docs/finetune.md"
    if command in ("glue", "swag", "squad", "ner"):
        assert "--checkpoint" in "\n".join(lines)


def test_glue_rte_writes_metrics_dev_predictions_and_submission(bert_uncased_folder, tmp_path: Path):
    data = require(SAMPLES / "rte" / "dummy_data" / "RTE")
    out = tmp_path / "rte"
    result = run(
        "glue",
        "--task",
        "rte",
        "--data-dir",
        str(data),
        "--checkpoint",
        bert_uncased_folder,
        "--output",
        str(out),
        *QUICK,
    )
    assert json.loads(result.stdout)["task"] == "rte"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["main_metric"] == "accuracy" and 0.0 <= metrics["dev"]["accuracy"] <= 1.0
    assert metrics["num_examples"] == {"train": 3, "dev": 2}
    assert metrics["selected"] == {"batch_size": 2, "lr": 1e-3, "epochs": 1.0}
    submission = (out / "RTE.tsv").read_text().splitlines()
    assert submission[0] == "index\tprediction"
    assert [line.split("\t")[0] for line in submission[1:]] == ["0"]
    assert submission[1].split("\t")[1] in ("entailment", "not_entailment")
    dev = (out / "dev_predictions.tsv").read_text().splitlines()
    assert dev[0] == "index\tprediction\tlabel" and len(dev) == 3


def test_glue_mnli_seeds_matched_mismatched_and_diagnostic(bert_uncased_folder, tmp_path: Path):
    data = require(SAMPLES / "mnli" / "dummy_data" / "MNLI")
    ax = require(SAMPLES / "ax" / "dummy_data" / "ax.tsv")
    out = tmp_path / "mnli"
    run(
        "glue",
        "--task",
        "mnli",
        "--data-dir",
        str(data),
        "--checkpoint",
        bert_uncased_folder,
        "--output",
        str(out),
        "--diagnostic",
        str(ax),
        "--seeds",
        "2",
        *QUICK,
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["dev"]) == {"matched_accuracy", "mismatched_accuracy"}
    assert [r["config"]["seed"] for r in metrics["runs"]] == [42, 43]
    assert all((out / "runs" / r["name"] / "metrics.json").exists() for r in metrics["runs"])
    assert metrics["dev_sd"]["matched_accuracy"] >= 0.0
    for name, rows in (("MNLI-m.tsv", 1), ("MNLI-mm.tsv", 1), ("AX.tsv", 3)):
        lines = (out / name).read_text().splitlines()
        assert lines[0] == "index\tprediction" and len(lines) == rows + 1
        assert all(line.split("\t")[1] in ("contradiction", "entailment", "neutral") for line in lines[1:])


def test_glue_stsb_submission_is_scores(bert_uncased_folder, tmp_path: Path):
    data = require(SHARED_DATA / "glue" / "STS-B")
    out = tmp_path / "stsb"
    run(
        "glue",
        "--task",
        "stsb",
        "--data-dir",
        str(data),
        "--checkpoint",
        bert_uncased_folder,
        "--output",
        str(out),
        "--max-train-examples",
        "8",
        "--max-eval-examples",
        "8",
        "--no-test-predictions",
        *QUICK,
    )
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["dev"]) == {"pearson", "spearman"} and metrics["main_metric"] == "spearman"
    assert not (out / "STS-B.tsv").exists()
    rows = (out / "dev_predictions.tsv").read_text().splitlines()[1:]
    assert len(rows) == 8 and all(0.0 <= float(r.split("\t")[1]) <= 5.0 for r in rows)


def test_user_errors_are_one_line_messages(bert_uncased_folder, tmp_path: Path):
    (tmp_path / "empty").mkdir()
    result = run(
        "glue",
        "--task",
        "mrpc",
        "--data-dir",
        str(tmp_path / "empty"),
        "--checkpoint",
        bert_uncased_folder,
        "--output",
        str(tmp_path / "o"),
        expect=1,
    )
    assert "error: " in result.output and "train.tsv not found" in result.output
    data = require(SAMPLES / "rte" / "dummy_data" / "RTE")
    result = run(
        "glue",
        "--task",
        "rte",
        "--data-dir",
        str(data),
        "--checkpoint",
        str(tmp_path / "empty"),
        "--output",
        str(tmp_path / "o"),
        expect=1,
    )
    assert "config.json not found" in result.output
    result = run(
        "glue",
        "--task",
        "rte",
        "--data-dir",
        str(data),
        "--checkpoint",
        bert_uncased_folder,
        "--output",
        str(tmp_path / "o"),
        "--lr",
        "0",
        expect=2,
    )
    assert "--lr must be positive" in result.output
    result = run(
        "glue",
        "--task",
        "rte",
        "--data-dir",
        str(data),
        "--checkpoint",
        bert_uncased_folder,
        "--output",
        str(tmp_path / "o"),
        "--max-seq-length",
        "4096",
        expect=1,
    )
    assert "--max-seq-length 4096" in result.output


def test_evaluate_squad_prints_official_metrics(tmp_path: Path):
    data_file = require(SHARED_DATA / "squad" / "allennlp-models_test_fixtures_squad.json")
    data = json.loads(data_file.read_text())
    gold = {
        qa["id"]: qa["answers"][0]["text"]
        for article in data["data"]
        for paragraph in article["paragraphs"]
        for qa in paragraph["qas"]
    }
    predictions = tmp_path / "predictions.json"
    predictions.write_text(json.dumps(gold))
    result = run(
        "evaluate",
        "squad",
        "--version",
        "1.1",
        "--data-file",
        str(data_file),
        "--predictions",
        str(predictions),
    )
    scores = json.loads(result.stdout)
    assert scores["exact_match"] == pytest.approx(100.0) and scores["f1"] == pytest.approx(100.0)


def test_report_puts_our_runs_beside_the_paper(tmp_path: Path):
    mrpc = tmp_path / "mrpc"
    mrpc.mkdir()
    (mrpc / "metrics.json").write_text(
        json.dumps(
            {"task": "mrpc", "dev": {"f1": 0.85, "accuracy": 0.8}, "dev_sd": {"f1": 0.012, "accuracy": 0.01}}
        )
    )
    swag = tmp_path / "swag"
    swag.mkdir()
    (swag / "metrics.json").write_text(json.dumps({"task": "swag", "dev": {"accuracy": 0.5}}))
    result = run(
        "report", str(mrpc), str(swag), "--output", str(tmp_path / "results"), "--label", "tiny (CPU)"
    )
    markdown = (tmp_path / "results" / "results.md").read_text()
    assert result.output.strip() == markdown.strip()
    header = next(line for line in markdown.splitlines() if line.startswith("| System | Split |"))
    assert header.split(" | ")[2:11] == [
        "MNLI-(m/mm)",
        "QQP",
        "QNLI",
        "SST-2",
        "CoLA",
        "STS-B",
        "MRPC",
        "RTE",
        "Average |",
    ]
    assert (
        "| BERT-BASE | test (paper, Table 1) | 84.6/83.4 | 71.2 | 90.5 | 93.5 | 52.1 | 85.8 | 88.9 | 66.4 | 79.6 |"
        in markdown
    )
    ours = next(line for line in markdown.splitlines() if line.startswith("| tiny (CPU) | dev"))
    assert "| 85.0 ± 1.2 |" in ours and ours.count("–") == 8
    assert "| tiny (CPU) | 50.0 | – |" in markdown
    report = json.loads((tmp_path / "results" / "results.json").read_text())
    assert report["glue"][-1]["values"] == {"mrpc": pytest.approx(85.0)}


def test_vocab_mismatch_is_refused_by_the_command(tmp_path: Path):
    folder = tmp_path / "bad"
    tiny_model().save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(VOCAB[:-1]) + "\n")
    data = require(SAMPLES / "rte" / "dummy_data" / "RTE")
    result = run(
        "glue",
        "--task",
        "rte",
        "--data-dir",
        str(data),
        "--checkpoint",
        str(folder),
        "--output",
        str(tmp_path / "o"),
        "--uncased",
        expect=1,
    )
    assert "has 19 tokens but" in result.output and "have 20 rows" in result.output


def test_squad_command_is_wired_to_run_squad(bert_uncased_folder, tmp_path: Path):
    data_file = require(SHARED_DATA / "squad" / "allennlp-models_test_fixtures_squad.json")
    out = tmp_path / "squad"
    result = run(
        "squad",
        "--version",
        "1.1",
        "--train-file",
        str(data_file),
        "--predict-file",
        str(data_file),
        "--checkpoint",
        bert_uncased_folder,
        "--output",
        str(out),
        "--epochs",
        "1",
        "--batch-size",
        "4",
        "--max-seq-length",
        "128",
        "--doc-stride",
        "64",
    )
    shown = json.loads(result.stdout)
    assert shown["task"] == "squad" and 0.0 <= shown["f1"] <= 100.0
    assert (out / "predictions.json").exists() and (out / "metrics.json").exists()
