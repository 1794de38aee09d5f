"""``finetune squad --bilstm``: a randomly initialised BiLSTM between the encoder and the span head
(the paper's "LTR & No NSP + BiLSTM"). It changes the architecture by exactly one BiLSTM, keeps the
logits' shape and padding independence, trains, and its saved model restores with the flag only."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from finetune.squad import SpanQuestionAnswering, SquadConfig, run_squad
from pretrain.model import BertConfig, BertModel
from schemas import storage
from schemas.commands import CommandError
from tests.conftest import SHARED_DATA, require

SQUAD_V1 = SHARED_DATA / "squad" / "allennlp-models_test_fixtures_squad.json"
VOCAB = SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt"


def tiny_config(vocab_size: int = 64) -> BertConfig:
    return BertConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_the_bilstm_adds_exactly_one_bidirectional_layer_under_the_span_head():
    encoder = BertModel(tiny_config())
    plain = SpanQuestionAnswering(encoder, seed=0)
    with_lstm = SpanQuestionAnswering(encoder, seed=0, bilstm=True).eval()
    h = 32
    lstm = 2 * (4 * h * h + 4 * h * h + 2 * 4 * h)  # two directions: W_ih, W_hh, b_ih, b_hh
    assert count(with_lstm) - count(plain) == lstm + (2 * h * 2 - h * 2)  # qa_outputs reads 2h
    assert with_lstm.qa_outputs.in_features == 2 * h and plain.qa_outputs.in_features == h
    assert with_lstm.bilstm.lstm.num_layers == 1 and with_lstm.bilstm.lstm.bidirectional
    ids = torch.tensor([[2, 5, 6, 3, 7, 8, 9, 3]])
    types = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1]])
    start, end = with_lstm(ids, types, torch.ones_like(ids)).logits
    assert start.shape == end.shape == (1, 8)
    assert not torch.allclose(start, plain.eval()(ids, types, torch.ones_like(ids)).logits[0])
    # Padding changes nothing: the BiLSTM reads only the real tokens.
    padded = torch.cat([ids, torch.zeros(1, 4, dtype=torch.long)], 1)
    mask = torch.tensor([[1] * 8 + [0] * 4])
    p_start, p_end = with_lstm(
        padded, torch.cat([types, torch.zeros(1, 4, dtype=torch.long)], 1), mask
    ).logits
    torch.testing.assert_close(p_start[:, :8], start, atol=1e-5, rtol=1e-5)
    assert (p_end[:, 8:] == -10000.0).all()


def test_run_squad_with_bilstm_trains_and_restores_only_with_the_flag(tiny_hf_folder, tmp_path):
    data = str(require(SQUAD_V1))
    window = {"max_seq_length": 64, "doc_stride": 32, "max_query_length": 16}
    config = SquadConfig(batch_size=8, device="cpu", progress=False, seed=0, epochs=2, lr=1e-3, **window)
    with_bilstm = dataclasses.replace(config, bilstm=True)
    out = tmp_path / "out"
    metrics = run_squad("1.1", data, data, str(tiny_hf_folder), storage.Folder(out), with_bilstm)
    assert metrics["config"]["bilstm"] is True and metrics["span_head"] == "fresh"
    losses = metrics["train"]["epoch_losses"]
    assert metrics["train"]["steps"] >= 4 and losses[-1] < losses[0]
    weights = out / "model" / "model.safetensors"
    from safetensors import safe_open

    with safe_open(str(weights), "pt") as f:
        assert {"bilstm.lstm.weight_ih_l0", "bilstm.lstm.weight_hh_l0_reverse"} <= set(f.keys())
    # The saved model answers the same again, with --bilstm; without it, it is refused.
    again = run_squad("1.1", None, data, str(out / "model"), storage.Folder(tmp_path / "again"), with_bilstm)
    assert again["span_head"] == "from the checkpoint"
    predictions = json.loads((out / "predictions.json").read_text())
    assert json.loads((tmp_path / "again" / "predictions.json").read_text()) == predictions
    with pytest.raises(CommandError, match="trained with a BiLSTM: give --bilstm"):
        run_squad("1.1", None, data, str(out / "model"), storage.Folder(tmp_path / "plain"), config)
