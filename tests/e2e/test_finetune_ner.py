"""`finetune ner` from the MiniLM weights on real CoNLL-2003 sentences: it learns (entity F1 on
valid.txt well above zero on a CI budget) and writes metrics.json and CoNLL-format predictions."""

from __future__ import annotations

import json

import pytest

from finetune.ner import NerConfig, run_ner
from schemas import storage
from tests.conftest import SHARED_DATA, require

pytestmark = pytest.mark.slow
SMALL = {"max_seq_length": 48, "max_train_examples": 240, "max_eval_examples": 120}


def test_ner_learns_from_minilm(minilm_folder, tmp_path):
    data = require(SHARED_DATA / "ner" / "conll2003")
    config = NerConfig(epochs=2, lr=2e-4, batch_size=16, seed=1, device="cpu", progress=False, **SMALL)
    result = run_ner(str(data), str(minilm_folder), storage.Folder(tmp_path / "ner"), config)
    assert result["valid"]["f1"] > 0.15, result["valid"]
    assert set(result["valid"]["per_type"]) <= {"PER", "LOC", "ORG", "MISC"}
    saved = json.loads((tmp_path / "ner" / "metrics.json").read_text())
    assert saved["valid"]["f1"] == result["valid"]["f1"]
    lines = (tmp_path / "ner" / "valid_predictions.txt").read_text().split("\n\n")
    assert len([s for s in lines if s.strip()]) == 120
    assert all(len(line.split()) == 3 for line in lines[0].splitlines())


def test_feature_based_ner_learns_from_frozen_minilm(minilm_folder, tmp_path):
    """Table 7's feature-based mode: the frozen encoder's last four layers (learned weighted sum)
    into a BiLSTM. Measured: valid F1 0.32 on the first 120 sentences after 240 training sentences
    x 3 epochs (seed 1); the bar is set well below that."""
    data = require(SHARED_DATA / "ner" / "conll2003")
    config = NerConfig(
        epochs=3,
        lr=2e-3,
        batch_size=8,
        seed=1,
        device="cpu",
        progress=False,
        features="sum-last-4",
        cache_features=True,
        **SMALL,
    )
    result = run_ner(str(data), str(minilm_folder), storage.Folder(tmp_path / "ner"), config)
    assert result["valid"]["f1"] > 0.15, result["valid"]
    saved = json.loads((tmp_path / "ner" / "metrics.json").read_text())
    assert saved["mode"] == "feature-based" and saved["feature_based"]["layers"] == [3, 4, 5, 6]
    assert saved["feature_based"]["lstm_units"] == 384  # the encoder's hidden size
    lines = (tmp_path / "ner" / "valid_predictions.txt").read_text().split("\n\n")
    assert len([s for s in lines if s.strip()]) == 120
