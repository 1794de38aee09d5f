"""`finetune swag` end to end on the real SWAG rows, from the real MiniLM weights: the pipeline
runs (finite loss, metrics.json, predictions), not a learning check (11 training rows)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from finetune.cli import main
from tests.conftest import SHARED_DATA, require

pytestmark = pytest.mark.slow

SWAG = SHARED_DATA / "swag"


def test_swag_end_to_end(minilm_folder: Path, tmp_path: Path):
    train = require(SWAG / "allennlp-models_test_fixtures_swag.csv")
    regular = require(SWAG / "hf_dummy" / "regular")
    out = tmp_path / "swag"
    threads = torch.get_num_threads()
    torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else 2)  # see test_finetune_glue
    try:
        result = CliRunner().invoke(
            main,
            [
                "swag",
                "--train-file",
                str(train),
                "--dev-file",
                str(regular / "val.csv"),
                "--test-file",
                str(regular / "test.csv"),
                "--checkpoint",
                str(minilm_folder),
                "--output",
                str(out),
                "--epochs",
                "1",
                "--batch-size",
                "4",
                "--lr",
                "5e-5",
                "--max-seq-length",
                "64",
            ],
            catch_exceptions=False,
        )
    finally:
        torch.set_num_threads(threads)
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["task"] == "swag" and metrics["num_examples"] == {"train": 11, "dev": 4, "test": 4}
    assert 0.0 <= metrics["dev"]["accuracy"] <= 1.0
    assert metrics["train"]["steps"] == 3 and all(math.isfinite(x) for x in metrics["train"]["epoch_losses"])
    assert metrics["checkpoint"] == str(minilm_folder)
    predictions = (out / "test_predictions.csv").read_text().splitlines()
    assert predictions[0] == "pred" and len(predictions) == 5 and all(p in "0123" for p in predictions[1:])
    dev = (out / "dev_predictions.csv").read_text().splitlines()
    assert dev[0] == "index,pred,label" and len(dev) == 5
