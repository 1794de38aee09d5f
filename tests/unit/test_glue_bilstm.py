"""``finetune glue --bilstm``: a randomly initialised BiLSTM between the encoder and the classifier
(the paper's Table 5 row "+ BiLSTM"). Its parameters exist and train, the classifier reads its
output (not the pooled [CLS]), padding changes nothing, a tiny run on real MRPC rows learns, and
the saved model restores (with the flag only) and predicts the same again."""

from __future__ import annotations

import dataclasses
import json

import pytest
import safetensors
import torch
from click.testing import CliRunner

from finetune.cli import main
from finetune.config import FitConfig
from finetune.glue import GlueConfig, build_classifier, run_glue
from finetune.loop import fit
from pretrain.model import BertConfig, BertModel
from schemas import storage
from schemas.commands import CommandError
from tests.conftest import SHARED_DATA, require

MRPC = SHARED_DATA / "glue" / "MRPC"
VOCAB = SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt"
H = 32


@pytest.fixture(autouse=True)
def one_thread():
    """One thread: the LSTM's small matrix products are many times slower with two OpenMP threads
    on a busy 2-core machine (measured: 0.7 s against 0.01 s per step)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny_config(vocab_size: int = 64) -> BertConfig:
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=H,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


IDS = torch.tensor([[2, 5, 6, 3, 7, 8, 9, 3], [2, 11, 12, 3, 13, 3, 0, 0]])
TYPES = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1, 0, 0]])
MASK = torch.tensor([[1] * 8, [1] * 6 + [0] * 2])


def test_the_classifier_reads_the_bilstm_final_states_not_the_pooled_cls():
    encoder = BertModel(tiny_config())
    plain = build_classifier(encoder, 3, seed=0, bilstm=False).eval()
    model = build_classifier(encoder, 3, seed=0, bilstm=True).eval()
    lstm = 2 * (4 * H * H + 4 * H * H + 2 * 4 * H)  # one layer, two directions: W_ih, W_hh, b_ih, b_hh
    assert count(model) - count(plain) == lstm + (2 * H * 3 - H * 3)  # the classifier reads 2H
    assert model.classifier.in_features == 2 * H and model.bilstm.lstm.num_layers == 1
    logits = model(IDS, TYPES, MASK).logits
    # By hand: the forward direction at each sequence's last real token, the backward one at [CLS].
    with torch.no_grad():
        sequence, _ = encoder(IDS, TYPES, MASK)
        out = model.bilstm(sequence, MASK)
        last = MASK.sum(-1) - 1
        summary = torch.cat([out[torch.arange(2), last, :H], out[:, 0, H:]], -1)
        torch.testing.assert_close(logits, model.classifier(summary))
        # Changing the BiLSTM changes the logits; the pooler no longer matters.
        encoder.pooler.dense.weight.add_(1.0)
        torch.testing.assert_close(model(IDS, TYPES, MASK).logits, logits)
        model.bilstm.lstm.weight_hh_l0_reverse.add_(0.5)
        assert not torch.allclose(model(IDS, TYPES, MASK).logits, logits)
    # Padding changes nothing: the second sequence alone, unpadded, gives its row again.
    alone = model(IDS[1:, :6], TYPES[1:, :6], MASK[1:, :6]).logits
    torch.testing.assert_close(alone, model(IDS, TYPES, MASK).logits[1:], atol=1e-5, rtol=1e-5)


def test_one_step_changes_the_bilstm_and_the_encoder():
    model = build_classifier(BertModel(tiny_config()), 2, seed=1, bilstm=True)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    features = [
        {"input_ids": ids[: int(m.sum())].tolist(), "token_type_ids": t[: int(m.sum())].tolist(), "labels": y}
        for ids, t, m, y in zip(IDS, TYPES, MASK, (0, 1), strict=True)
    ]
    fit(model, features, FitConfig(epochs=1, lr=1e-2, batch_size=2, warmup_proportion=0, device="cpu"))
    after = model.state_dict()
    for name in ("bilstm.lstm.weight_ih_l0", "bilstm.lstm.weight_hh_l0_reverse", "classifier.weight"):
        assert not torch.equal(before[name], after[name]), name
    assert not torch.equal(
        before["bert.encoder.layer.0.attention.self.query.weight"],
        after["bert.encoder.layer.0.attention.self.query.weight"],
    )


def test_a_tiny_run_on_real_mrpc_learns_saves_and_restores_with_the_flag_only(tiny_hf_folder, tmp_path):
    data = str(require(MRPC))
    out = tmp_path / "mrpc"
    common = {"max_seq_length": 64, "max_eval_examples": 16, "test_predictions": False, "device": "cpu"}
    config = GlueConfig(
        epochs=6, lr=3e-3, batch_size=8, seed=3, progress=False, max_train_examples=32, **common
    )
    metrics = run_glue(
        "mrpc", data, str(tiny_hf_folder), storage.Folder(out), dataclasses.replace(config, bilstm=True)
    )
    losses = metrics["runs"][0]["train"]["epoch_losses"]
    assert losses[-1] < 0.75 * losses[0], losses  # it fits its 32 real rows (measured: 0.70 -> 0.37)
    assert metrics["bilstm"] is True and metrics["head"] == "fresh" and "model/" in metrics["files"]
    saved = json.loads((out / "model" / "config.json").read_text())
    assert saved["architectures"] == ["BertForSequenceClassification"] and saved["finetuning_task"] == "mrpc"
    with safetensors.safe_open(str(out / "model" / "model.safetensors"), "pt") as f:
        assert {"bilstm.lstm.weight_ih_l0", "bilstm.lstm.weight_hh_l0_reverse", "classifier.weight"} <= set(
            f.keys()
        )
    # The saved model predicts the dev rows exactly as the run did, with --bilstm; without, refused.
    again = tmp_path / "again"
    runner = CliRunner()
    args = [
        "glue",
        "--task",
        "mrpc",
        "--data-dir",
        data,
        "--checkpoint",
        str(out / "model"),
        "--output",
        str(again),
        "--predict-only",
        "--max-eval-examples",
        "16",
        "--max-seq-length",
        "64",
        "--no-test-predictions",
        "--device",
        "cpu",
        "--no-save-model",
    ]
    result = runner.invoke(main, [*args, "--bilstm"])
    assert result.exit_code == 0, result.output
    restored = json.loads((again / "metrics.json").read_text())
    assert restored["head"] == "from the checkpoint" and restored["dev"] == metrics["dev"]
    assert (again / "dev_predictions.tsv").read_text() == (out / "dev_predictions.tsv").read_text()
    refused = runner.invoke(main, [*args[:8], str(tmp_path / "refused"), *args[9:]])
    assert refused.exit_code == 1 and "trained with a BiLSTM: give --bilstm" in refused.output
    with pytest.raises(CommandError, match="needs a fine-tuned classifier"):
        predict_only = dataclasses.replace(config, predict_only=True)
        run_glue("mrpc", data, str(tiny_hf_folder), storage.Folder(tmp_path / "none"), predict_only)


def test_help_names_the_flags():
    result = CliRunner().invoke(main, ["glue", "--help"])
    assert "--bilstm" in result.output and "--predict-only" in result.output and "+ BiLSTM" in result.output
