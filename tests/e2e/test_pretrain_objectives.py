"""`pretrain --no-nsp` and `--objective ltr` on real shards: the run trains, its checkpoint has no
NSP head, and the LTR run's model is causal and its next-token loss falls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file

from pretrain.config import PretrainConfig
from pretrain.model import BertForPreTraining
from pretrain.train import train

pytestmark = pytest.mark.slow

TINY = {"config": "2/64/2", "global_batch_size": 8, "precision": "fp32", "num_workers": 0, "log_steps": 5}


def _train(shards: Path, run: Path, **overrides) -> list[dict]:
    cfg = PretrainConfig(
        shards=str(shards),
        output=str(run),
        max_steps=20,
        lr=3e-3,
        warmup_steps=2,
        save_steps=20,
        **TINY,
        **overrides,
    )
    train(cfg)
    lines = (run / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["split"] == "train"]


@pytest.mark.parametrize("switch", [{"nsp": False}, {"objective": "ltr"}])
def test_objective_switches_train_without_nsp(shards, tmp_path, switch):
    records = _train(shards, tmp_path / "run", **switch)
    assert all(r["nsp_loss"] == 0.0 for r in records)
    assert records[-1]["mlm_loss"] < records[0]["mlm_loss"]
    weights = load_file(next((tmp_path / "run" / "checkpoints").iterdir()) / "model.safetensors")
    assert not any("seq_relationship" in k for k in weights)
    model = BertForPreTraining.from_pretrained(next((tmp_path / "run" / "checkpoints").iterdir()))
    assert model.config.nsp is False
    assert model.config.causal is (switch.get("objective") == "ltr")
    assert (model.config.num_hidden_layers, model.config.hidden_size, model.config.num_attention_heads) == (
        2,
        64,
        2,
    )
