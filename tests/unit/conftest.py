"""Fixtures shared by the unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import save_tiny_bert


@pytest.fixture
def tiny_hf_folder(tmp_path: Path) -> Path:
    """A randomly initialised 2-layer, 32-wide BERT saved as a transformers-format folder with the
    released uncased vocabulary, no dropout (skips where the shared data is absent)."""
    return save_tiny_bert(
        tmp_path / "tiny",
        layers=2,
        max_position_embeddings=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
