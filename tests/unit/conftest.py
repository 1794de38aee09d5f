"""Fixtures shared by the unit tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pretrain.model import BertConfig, BertForPreTraining
from tests.conftest import SHARED_DATA, require

RELEASED_VOCAB = SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt"


@pytest.fixture
def tiny_hf_folder(tmp_path: Path) -> Path:
    """A randomly initialised 2-layer, 32-wide BERT saved as a transformers-format folder with the
    released uncased vocabulary (skips where the shared data is absent)."""
    vocab = require(RELEASED_VOCAB).read_text().splitlines()
    config = BertConfig(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=128, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    folder = tmp_path / "tiny"
    BertForPreTraining(config, seed=0).save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    return folder
