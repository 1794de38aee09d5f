"""A fine-tuning run whose loss or gradients stop being finite stops there, by pre-training's rule
(:class:`pretrain.optim.Health`, tested on its own in test_divergence.py): one line naming the step
and the likely cause, exit 1, no model and no metrics.json written. A learning rate outside any
sane range is refused before anything is read (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from finetune.config import FitConfig
from finetune.encoder import load_encoder
from finetune.heads import Classifier, TaskOutput
from finetune.loop import fit
from finetune.sequences import encode_pair
from schemas.commands import CommandError
from tests.faults.finetune_inputs import inputs, invoke
from tests.unit.test_finetune_common import hf_folder

QUIET = {"batch_size": 2, "device": "cpu", "precision": "fp32", "progress": False}


def test_a_loss_that_turns_nan_stops_the_run_naming_the_step(tmp_path: Path):
    encoder = load_encoder(str(hf_folder(tmp_path / "hf")))
    features = [
        {**encode_pair(encoder.tokenizer, "the movie was good", None, 16), "labels": i % 2} for i in range(8)
    ]
    model = Classifier(encoder.model, 2)
    with pytest.raises(CommandError) as stopped:  # lr 1e30: step 1 makes the weights ~1e30
        fit(model, features, FitConfig(lr=1e30, epochs=3, warmup_proportion=0, **QUIET))
    assert str(stopped.value) == (
        "training diverged at step 2: the loss or the gradients are not finite (NaN or infinity); the "
        "learning rate (--lr 1e+30) is likely too high for this model and batch; no model was saved"
    )


class _Sqrt(nn.Module):
    """A finite loss (0) whose gradient is infinite: d sqrt(w) / dw at w = 0."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, token_type_ids=None, attention_mask=None, labels=None) -> TaskOutput:
        return TaskOutput(self.w, torch.sqrt(self.w).sum())


def test_infinite_gradients_stop_the_run_outside_fp16():
    features = [{"input_ids": [1, 2], "token_type_ids": [0, 0], "labels": 0}] * 4
    with pytest.raises(
        CommandError, match=r"^training diverged at step 1: the loss or the gradients are not"
    ):
        fit(_Sqrt(), features, FitConfig(lr=1e-3, **QUIET))


def test_a_diverging_command_writes_no_model_and_no_metrics(tmp_path: Path, monkeypatch):
    monkeypatch.setattr("finetune.config.MAX_LR", 1e31)  # let --lr 1e30 through the range check
    args, _ = inputs(tmp_path, str(hf_folder(tmp_path / "hf")))["glue train.tsv"]
    code, errors, _ = invoke([*args, "--lr", "1e30", "--warmup-proportion", "0", "--epochs", "3"])
    assert code == 1 and len(errors) == 1, errors
    assert errors[0].startswith("error: training diverged at step 2: the loss or the gradients"), errors
    assert errors[0].endswith("; no model was saved"), errors
    assert not (tmp_path / "out" / "model").exists() and not (tmp_path / "out" / "metrics.json").exists()


@pytest.mark.parametrize(
    ("flag", "value", "said"),
    [
        ("--lr", "1e30", "--lr must be at most 1, got 1e+30"),
        ("--lr", "nan", "--lr must be positive and finite, got nan"),
        ("--epochs", "1e9", "--epochs must be at most 1000, got 1e+09"),
        ("--weight-decay", "5", "--weight-decay must be in [0, 1], got 5.0"),
        ("--batch-size", "0", "--batch-size must be between 1 and 2,147,483,647, got 0"),
        ("--device", "gpu:x", "--device must be auto, cpu, cuda or cuda:N, got 'gpu:x'"),
    ],
)
def test_settings_outside_a_sane_range_are_refused_before_anything_is_read(flag, value, said, tmp_path: Path):
    args, _ = inputs(tmp_path, str(tmp_path / "none"))["glue train.tsv"]
    code, errors, _ = invoke([*args, flag, value])
    assert code == 2 and errors == [f"error: {said}"]
    assert not (tmp_path / "out").exists()
