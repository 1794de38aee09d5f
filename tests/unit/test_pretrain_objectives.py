"""The ablation switches of the model: no NSP head, causal (LTR) attention, L/H/A sizes and their
parameter counts against transformers' BertForPreTraining."""

from __future__ import annotations

import pytest
import torch
from click.testing import CliRunner

from pretrain.cli import main as pretrain_cli
from pretrain.config import PretrainConfig
from pretrain.model import (
    BertConfig,
    BertForPreTraining,
    count_parameters,
    left_to_right_batch,
    parameter_counts,
    parse_model_size,
    pretraining_loss,
)
from tests.unit.test_pretrain_model import VOCAB, random_batch, tiny_config


def test_no_nsp_model_has_no_nsp_parameters_and_no_nsp_loss():
    with_nsp = BertForPreTraining(tiny_config(), seed=1)
    without = BertForPreTraining(tiny_config(nsp=False), seed=1)
    names = {n for n, _ in without.named_parameters()}
    assert not any("seq_relationship" in n for n in names)
    assert count_parameters(with_nsp) - count_parameters(without) == 2 * 32 + 2
    batch = random_batch()
    out = without(
        batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], batch["masked_lm_positions"]
    )
    assert out.seq_relationship_logits is None
    loss = pretraining_loss(
        out, batch["masked_lm_ids"], batch["masked_lm_weights"], batch["next_sentence_labels"]
    )
    assert float(loss.nsp_loss) == 0.0 and int(loss.nsp_count) == 0
    assert torch.equal(loss.total, loss.mlm_loss)
    # the NSP labels do not matter at all
    flipped = pretraining_loss(
        out, batch["masked_lm_ids"], batch["masked_lm_weights"], 1 - batch["next_sentence_labels"]
    )
    assert torch.equal(flipped.total, loss.total)
    loss.total.backward()


def test_causal_attention_ignores_later_tokens_and_bidirectional_does_not():
    batch = random_batch(batch=1, length=16)
    changed = batch["input_ids"].clone()
    changed[0, 10] = (changed[0, 10] % (VOCAB - 1)) + 1  # another real token at position 10
    for causal in (True, False):
        model = BertForPreTraining(tiny_config(causal=causal, nsp=False), seed=2).eval()
        with torch.no_grad():
            a = model.bert(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])[0]
            b = model.bert(changed, batch["token_type_ids"], batch["attention_mask"])[0]
        earlier_same = torch.allclose(a[0, :10], b[0, :10], atol=1e-6)
        assert earlier_same is causal
        assert not torch.allclose(a[0, 10:], b[0, 10:])


def test_left_to_right_batch_restores_tokens_and_predicts_every_next_one():
    batch = random_batch()
    original = batch["input_ids"].clone()
    for row, (positions, ids, weights) in enumerate(
        zip(batch["masked_lm_positions"], batch["masked_lm_ids"], batch["masked_lm_weights"], strict=True)
    ):
        for p, i, w in zip(positions, ids, weights, strict=True):
            if w > 0:
                original[row, p] = i
                batch["input_ids"][row, p] = 103  # as if masked
    ltr = left_to_right_batch(batch)
    assert "masked_lm_positions" not in ltr
    assert torch.equal(ltr["input_ids"], original)
    assert torch.equal(ltr["masked_lm_ids"][:, :-1], original[:, 1:])
    lengths = batch["attention_mask"].sum(1)
    assert ltr["masked_lm_weights"].sum(1).tolist() == (lengths - 1).tolist()
    model = BertForPreTraining(tiny_config(causal=True, nsp=False), seed=2)
    out = model(ltr["input_ids"], ltr["token_type_ids"], ltr["attention_mask"])
    assert out.prediction_logits.shape == (3, 16, VOCAB)
    loss = pretraining_loss(out, ltr["masked_lm_ids"], ltr["masked_lm_weights"], ltr["next_sentence_labels"])
    assert int(loss.mlm_count) == int((lengths - 1).sum())


@pytest.mark.parametrize(
    ("size", "shape"), [("base", (12, 768, 12)), ("large", (24, 1024, 16)), ("6/512/8", (6, 512, 8))]
)
def test_model_sizes(size, shape):
    assert parse_model_size(size) == shape
    config = BertConfig.preset(size, 1000)
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == shape
    assert config.intermediate_size == 4 * shape[1]


@pytest.mark.parametrize("bad", ["12/768", "12/770/12", "0/128/2", "a/b/c", "huge"])
def test_bad_sizes_are_refused_by_the_config(bad):
    with pytest.raises(ValueError):
        parse_model_size(bad)
    assert any("--config" in p for p in PretrainConfig(shards="s", output="o", config=bad).problems())


@pytest.mark.parametrize(
    ("size", "vocab", "nsp"), [("2/64/2", 1000, True), ("3/96/4", 517, True), ("1/128/8", 300, False)]
)
def test_parameter_counts_equal_transformers(size, vocab, nsp):
    transformers = pytest.importorskip("transformers")
    config = BertConfig.preset(size, vocab, nsp=nsp)
    hf_config = transformers.BertConfig(
        **{k: v for k, v in config.to_dict().items() if k not in ("nsp", "causal")}
    )
    cls = transformers.BertForPreTraining if nsp else transformers.BertForMaskedLM
    if nsp:
        reference = cls(hf_config)
    else:
        hf_config.is_decoder = False
        reference = cls(hf_config)  # BertForMaskedLM has no pooler: add it back
    expected = sum(p.numel() for p in reference.parameters())
    if not nsp:
        expected += config.hidden_size**2 + config.hidden_size
    counts = parameter_counts(config)
    assert counts["total"] == expected
    assert counts["total"] == sum(v for k, v in counts.items() if k != "total")
    # and our own model over the unpadded vocabulary
    ours = BertForPreTraining(BertConfig.preset(size, vocab, nsp=nsp, pad_vocab_to_multiple=1))
    assert count_parameters(ours) == counts["total"]


def test_params_command_prints_the_papers_sizes():
    result = CliRunner().invoke(pretrain_cli, ["params", "--config", "base"])
    assert result.exit_code == 0, result.output
    assert "110,106,428" in result.output  # the paper's "110M"
    result = CliRunner().invoke(pretrain_cli, ["params", "--config", "large"])
    assert "336,226,108" in result.output  # the paper's "340M"
    result = CliRunner().invoke(pretrain_cli, ["params", "--config", "12/770/12"])
    assert result.exit_code == 2 and "--config 12/770/12" in result.output
