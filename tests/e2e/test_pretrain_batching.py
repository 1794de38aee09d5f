"""`pretrain --batching` on real shards: packed trains the padded run's model, bucketed resumes
exactly mid-window, and validation figures do not depend on the layout; unmasked validation
shards are masked (by content), not evaluated on zero predictions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from pretrain.config import PretrainConfig
from pretrain.train import train
from schemas.commands import UsageError
from tests.e2e.conftest import FAST_RUNNER, run_cli

pytestmark = pytest.mark.slow

TINY = {"config": "tiny", "global_batch_size": 8, "precision": "fp32", "num_workers": 0, "log_steps": 1}


def _weights(run: Path, step: int) -> dict[str, torch.Tensor]:
    return load_file(run / "checkpoints" / f"step-{step:08d}" / "model.safetensors")


def _records(run: Path, split: str) -> list[dict]:
    rows = map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
    return [r for r in rows if r["split"] == split]


def test_packed_batches_train_the_model_the_padded_ones_do(shards, validation_shards, tmp_path):
    common = {**TINY, "dropout": 0.0, "max_steps": 3, "save_steps": 3, "lr": 1e-3, "adam_eps": 1e-3}
    common |= {"validation_shards": str(validation_shards), "eval_batches": 2}
    for mode in ("padded", "packed", "bucketed"):
        train(PretrainConfig(shards=str(shards), output=str(tmp_path / mode), batching=mode, **common))
    padded, packed = _weights(tmp_path / "padded", 3), _weights(tmp_path / "packed", 3)
    assert max(float((padded[k] - packed[k]).abs().max()) for k in padded) < 1e-5
    train_p, train_k = _records(tmp_path / "padded", "train"), _records(tmp_path / "packed", "train")
    assert [r["tokens"] for r in train_p] == [r["tokens"] for r in train_k]
    for a, b in zip(train_p, train_k, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    # validation: the same examples in every layout, so the same figures
    val = {mode: _records(tmp_path / mode, "validation")[-1] for mode in ("padded", "packed")}
    assert val["padded"]["examples"] == val["packed"]["examples"] > 0
    assert val["padded"]["mlm_loss"] == pytest.approx(val["packed"]["mlm_loss"], rel=1e-5)
    bucketed = _records(tmp_path / "bucketed", "validation")[-1]
    assert bucketed["mlm_loss"] == pytest.approx(val["padded"]["mlm_loss"], rel=1e-3)  # other weights


def test_bucketed_run_resumed_mid_window_equals_an_uninterrupted_one(shards, tmp_path):
    common = {**TINY, "batching": "bucketed", "bucket_window": 4, "save_steps": 3}
    train(PretrainConfig(shards=str(shards), output=str(tmp_path / "whole"), max_steps=6, **common))
    train(PretrainConfig(shards=str(shards), output=str(tmp_path / "cut"), max_steps=3, **common))
    train(
        PretrainConfig(shards=str(shards), output=None, resume=str(tmp_path / "cut"), max_steps=6, **common)
    )
    whole, cut = _weights(tmp_path / "whole", 6), _weights(tmp_path / "cut", 6)
    assert all(torch.equal(whole[k], cut[k]) for k in whole)
    tokens = [r["tokens"] for r in _records(tmp_path / "whole", "train")]
    assert [r["tokens"] for r in _records(tmp_path / "cut", "train")] == tokens


def test_packed_batching_refuses_the_causal_objective(shards, tmp_path):
    cfg = PretrainConfig(
        shards=str(shards), output=str(tmp_path / "r"), batching="packed", objective="ltr", **TINY
    )
    with pytest.raises(UsageError, match="--objective ltr needs padded or bucketed"):
        train(cfg)


def test_unmasked_validation_shards_are_masked_the_same_in_every_run(corpus_output, vocab, shards, tmp_path):
    unmasked = tmp_path / "val-unmasked"
    run_cli(
        "examples",
        "--corpus",
        str(corpus_output),
        "--vocab",
        vocab,
        "--output",
        str(unmasked),
        "--split",
        "validation",
        "--max-seq-length",
        "64",
        "--dupe-factor",
        "1",
        "--num-shards",
        "1",
        "--num-buckets",
        "2",
        "--no-masking",
        *FAST_RUNNER,
    )
    common = {**TINY, "max_steps": 1, "save_steps": 1, "validation_shards": str(unmasked), "eval_batches": 3}
    for name, batch in (("a", 8), ("b", 4)):  # other batch boundaries, other number of batches
        cfg = {**common, "global_batch_size": batch, "eval_batches": 24 // batch}
        train(PretrainConfig(shards=str(shards), output=str(tmp_path / name), dropout=0.0, lr=1e-9, **cfg))
    a, b = (_records(tmp_path / n, "validation")[-1] for n in "ab")
    assert a["examples"] == b["examples"] == 24
    assert a["mlm_perplexity"] > 100  # predictions were made (0 of them would read 1.0)
    assert a["mlm_loss"] == pytest.approx(b["mlm_loss"], rel=1e-4)  # the same examples, the same masks
