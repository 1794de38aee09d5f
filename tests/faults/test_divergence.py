"""Divergence stops a run: a loss or gradients that are not finite end ``pretrain`` with exit 1 and
one line naming the step and the likely cause; no checkpoint after the bad step, and none holding
a tensor that is not finite, is committed; resume refuses a checkpoint that holds one. The rule
(:class:`pretrain.optim.Health`) on its own, then real runs on the enwiki shards."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import safetensors.torch
import torch
from click.testing import CliRunner

from pretrain import checkpoint as ckpt
from pretrain import train as train_module
from pretrain.cli import main as pretrain
from pretrain.config import PretrainConfig
from pretrain.model import BertConfig, BertForPreTraining
from pretrain.optim import MAX_FP16_SKIPS, Diverged, Health
from pretrain.train import Trainer, train
from schemas import storage

TINY = {"config": "tiny", "global_batch_size": 8, "precision": "fp32", "num_workers": 0, "warmup_steps": 1}
NAN = torch.tensor(float("nan"))


def _watch(precision: str, steps: list[tuple[float, float]]) -> Health:
    """A health watch over steps of (loss, skipped)."""
    health = Health(torch.device("cpu"), precision)
    for step, (loss, skipped) in enumerate(steps, 1):
        health.update(step, torch.tensor(loss), torch.tensor(skipped))
    return health


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_in_fp32_and_bf16_one_step_that_is_not_finite_is_divergence(precision):
    _watch(precision, [(2.0, 0.0)] * 5).check(1e-4)  # healthy: nothing raised
    for steps, first in (
        ([(2.0, 0.0), (float("nan"), 0.0), (2.0, 0.0)], 2),
        ([(2.0, 0.0)] * 3 + [(2.0, 1.0)], 4),
    ):
        with pytest.raises(Diverged, match=rf"^training diverged at step {first}: the loss or the gradients"):
            _watch(precision, steps).check(1e-4)


def test_in_fp16_skipped_steps_are_normal_until_many_come_in_a_row():
    overflow, fine = (2.0, 1.0), (2.0, 0.0)
    _watch("fp16", ([overflow] * (MAX_FP16_SKIPS - 1) + [fine]) * 3).check(1e-4)
    with pytest.raises(Diverged, match=rf"at step {MAX_FP16_SKIPS + 1}: .*fp16's range too narrow"):
        _watch("fp16", [fine] + [overflow] * MAX_FP16_SKIPS).check(1e-4)
    with pytest.raises(Diverged, match="at step 2: "):  # a loss that is not finite: at once
        _watch("fp16", [fine, (float("inf"), 1.0)]).check(1e-4)


def _committed(run: Path) -> list[int]:
    return sorted(int(p.parent.name.split("-")[1]) for p in run.glob("checkpoints/*/COMMITTED"))


@pytest.mark.slow
def test_weights_that_overflow_stop_the_command_with_one_line(shards, tmp_path):
    """``--init-from`` a model whose head overflows: the loss is NaN from step 1."""
    tokens = (shards / "vocab.txt").read_text().splitlines()
    model = BertForPreTraining(BertConfig.preset("tiny", len(tokens)))
    with torch.no_grad():
        model.cls.predictions.transform.dense.weight.mul_(1e36)
    model.save_pretrained(tmp_path / "huge")
    shutil.copy(shards / "vocab.txt", tmp_path / "huge" / "vocab.txt")
    run = tmp_path / "run"
    args = ["--shards", str(shards), "--init-from", str(tmp_path / "huge"), "--output", str(run)]
    args += ["--global-batch-size", "8", "--precision", "fp32", "--num-workers", "0", "--save-steps", "1"]
    result = CliRunner().invoke(pretrain, [*args, "--max-steps", "4", "--quiet"])
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert result.output == (
        "error: training diverged at step 1: the loss or the gradients are not finite (NaN or infinity); "
        "the learning rate (--lr 0.0001) is likely too high for this model and batch; no checkpoint was saved\n"
    )
    assert _committed(run) == []


@pytest.mark.slow
def test_no_checkpoint_after_the_loss_went_bad_is_committed_and_resume_refuses_a_bad_one(
    shards, tmp_path, monkeypatch
):
    """The loss turns NaN at step 3 (after the checkpoint of step 2): the run stops at the next
    read, step 4, naming step 3; then a checkpoint whose weights are made NaN is refused."""
    calls, original = [], train_module.pretraining_loss

    def turns_bad(*args, **kwargs):
        loss = original(*args, **kwargs)
        calls.append(1)
        if len(calls) > 2:  # one micro batch a step: from step 3
            loss.mlm_loss = loss.mlm_loss * NAN
            loss.total = loss.total * NAN
        return loss

    monkeypatch.setattr(train_module, "pretraining_loss", turns_bad)
    run = tmp_path / "run"
    cfg = PretrainConfig(shards=str(shards), output=str(run), max_steps=8, save_steps=2, log_steps=5, **TINY)
    with pytest.raises(Diverged) as caught:
        train(cfg)
    assert str(caught.value).startswith(
        "training diverged at step 3: the loss or the gradients are not finite"
    )
    assert str(caught.value).endswith(f"step 2 is the newest checkpoint: --resume {run} with a lower --lr")
    assert _committed(run) == [2]
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert all(r["step"] <= 2 for r in records)  # nothing of the steps after the divergence

    monkeypatch.undo()  # the checkpoint of step 2, its weights made NaN and committed again
    url = ckpt.step_url(str(run), 2)
    weights = Path(url, "model.safetensors")
    tensors = safetensors.torch.load_file(weights)
    tensors["bert.pooler.dense.weight"][0, 0] = float("nan")
    header = json.loads(weights.read_bytes()[8 : 8 + int.from_bytes(weights.read_bytes()[:8], "little")])
    safetensors.torch.save_file(tensors, weights, metadata=header["__metadata__"])
    ckpt.commit(storage.Folder(url), 2, ckpt.run_id_of(str(run)))
    result = CliRunner().invoke(pretrain, ["--shards", str(shards), "--resume", str(run), "--max-steps", "4"])
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert "model.safetensors: cannot load" not in result.output
    assert "bert.pooler.dense.weight holds NaN or infinity" in result.output
    assert _committed(run) == [2]


@pytest.mark.slow
def test_a_checkpoint_holding_a_tensor_that_is_not_finite_is_never_committed(shards, tmp_path, monkeypatch):
    """Weights that overflow in the update of step 2 (its loss was finite): the checkpoint of step
    2 is refused before anything of it is written."""
    original = Trainer.step

    def overflows(self, data):
        result = original(self, data)
        if self.position.step == 2:
            with torch.no_grad():
                self.model.bert.embeddings.word_embeddings.weight[5, 0] = float("inf")
        return result

    monkeypatch.setattr(Trainer, "step", overflows)
    run = tmp_path / "run"
    cfg = PretrainConfig(shards=str(shards), output=str(run), max_steps=4, save_steps=1, log_steps=4, **TINY)
    with pytest.raises(
        Diverged, match=r"^training diverged by step 2: bert.embeddings.word_embeddings.weight holds"
    ):
        train(cfg)
    assert _committed(run) == [1] and not Path(ckpt.step_url(str(run), 2)).exists()
