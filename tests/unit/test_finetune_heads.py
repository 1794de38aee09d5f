"""Feature-based heads on tiny random encoders: hidden states equal transformers'
``output_hidden_states``; each Table 7 choice feeds exactly its layers; the frozen encoder is
unchanged by training; the BiLSTM ignores padding; cached activations train like live ones."""

from __future__ import annotations

import pytest
import torch

from finetune.config import FitConfig
from finetune.heads import BiLSTM, FeatureTagger, cache_layers, collate_tokens, collate_with_layers
from finetune.hidden import FEATURE_CHOICES, feature_layers, hidden_states, parse_layers
from finetune.loop import fit
from pretrain.model import BertConfig, BertForPreTraining

LAYERS = 5


def tiny_encoder(seed: int = 0, layers: int = LAYERS) -> BertForPreTraining:
    config = BertConfig(
        vocab_size=100,
        hidden_size=32,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    return BertForPreTraining(config, seed=seed).eval()


def padded_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 100, (3, 12), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0
    mask[2, 5:] = 0
    return {"input_ids": ids * mask, "token_type_ids": torch.zeros_like(ids), "attention_mask": mask}


def test_feature_layers_are_table_7s_rows():
    assert feature_layers("embeddings", 12) == (0,)
    assert feature_layers("second-to-last", 12) == (11,)
    assert feature_layers("last", 12) == (12,)
    assert feature_layers("sum-last-4", 12) == feature_layers("concat-last-4", 12) == (9, 10, 11, 12)
    assert feature_layers("sum-all", 12) == tuple(range(1, 13))
    with pytest.raises(ValueError, match="at least 4 layers"):
        feature_layers("concat-last-4", 3)
    with pytest.raises(ValueError, match="--features must be one of"):
        feature_layers("first", 12)


def test_parse_layers_counts_from_the_end_like_extract_features():
    assert parse_layers("-1,-2,-3,-4", 12) == (12, 11, 10, 9)
    assert parse_layers("0, 12", 12) == (0, 12) and parse_layers("-13", 12) == (0,)
    for bad, message in (
        ("-14", "out of range"),
        ("13", "out of range"),
        ("1,x", "integers"),
        ("-1,12", "named twice"),
        ("", "at least one"),
    ):
        with pytest.raises(ValueError, match=message):
            parse_layers(bad, 12)


def test_hidden_states_equal_transformers_output_hidden_states(tmp_path):
    transformers = pytest.importorskip("transformers")
    ours = tiny_encoder()
    ours.save_pretrained(tmp_path / "hf")
    theirs = transformers.BertModel.from_pretrained(str(tmp_path / "hf")).eval()
    batch = padded_batch()
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        expected = theirs(**batch, output_hidden_states=True).hidden_states
        states = hidden_states(ours.bert, **batch)
    assert len(states) == len(expected) == LAYERS + 1
    for mine, hf_state in zip(states, expected, strict=True):
        torch.testing.assert_close(mine[real], hf_state[real], rtol=0, atol=1e-5)

    # Each Table 7 choice feeds the BiLSTM exactly its layers (the weighted sums start as the mean).
    picks = {
        "embeddings": expected[0],
        "second-to-last": expected[LAYERS - 1],
        "last": expected[LAYERS],
        "sum-last-4": torch.stack(expected[LAYERS - 3 :]).mean(0),
        "concat-last-4": torch.cat(expected[LAYERS - 3 :], dim=-1),
        "sum-all": torch.stack(expected[1:]).mean(0),
    }
    assert set(picks) == set(FEATURE_CHOICES)
    for choice, want in picks.items():
        tagger = FeatureTagger(ours.bert, num_labels=5, features=choice, seed=0)
        with torch.no_grad():
            got = tagger.head_inputs(tagger.encoder_layers(**batch))
        assert got.shape == want.shape, choice
        torch.testing.assert_close(got[real], want[real], rtol=0, atol=1e-5, msg=choice)


def test_the_weighted_sum_is_learned_and_moves_towards_one_layer():
    tagger = FeatureTagger(tiny_encoder().bert, num_labels=3, features="sum-last-4", seed=0)
    layers = torch.zeros(1, 2, 4, 32)
    layers[:, :, 1] = 1.0  # only the second chosen layer is non-zero
    with torch.no_grad():
        tagger.mix.scalars.copy_(torch.tensor([0.0, 5.0, 0.0, 0.0]))
    mixed = tagger.head_inputs(layers)
    weight = torch.softmax(torch.tensor([0.0, 5.0, 0.0, 0.0]), 0)[1]
    torch.testing.assert_close(mixed, torch.full((1, 2, 32), float(weight)))
    assert tagger.mix.scalars.requires_grad and tagger.mix.gamma.requires_grad


def _features(num: int, seed: int = 0) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(num):
        length = 6 + i % 5
        ids = [1, *torch.randint(5, 100, (length - 2,), generator=g).tolist(), 2]
        labels = [-100] + [int(t) % 3 for t in ids[1:-1]] + [-100]  # learnable: a function of the id
        out.append({"input_ids": ids, "token_type_ids": [0] * length, "labels": labels})
    return out


def test_training_leaves_the_frozen_encoder_unchanged_and_in_eval_mode():
    encoder = tiny_encoder().bert
    before = {k: v.clone() for k, v in encoder.state_dict().items()}
    tagger = FeatureTagger(encoder, num_labels=3, features="concat-last-4", lstm_units=16, seed=0)
    config = FitConfig(epochs=3, lr=1e-2, batch_size=4, seed=0, device="cpu", progress=False)
    result = fit(tagger, _features(16), config, collate_fn=collate_tokens)
    assert result.epoch_losses[-1] < result.epoch_losses[0]  # the head learns ...
    after = encoder.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # ... the encoder does not
    assert all(p.grad is None for p in encoder.parameters())
    tagger.train()
    assert tagger.training and not encoder.training and not any(m.training for m in encoder.modules())
    trained = [n for n, p in tagger.named_parameters() if p.requires_grad]
    assert trained and not any(n.startswith("bert.") for n in trained)


def test_cached_layers_train_exactly_like_the_live_encoder():
    features = _features(10)
    config = FitConfig(epochs=2, lr=1e-2, batch_size=4, seed=3, device="cpu", progress=False)
    live = FeatureTagger(tiny_encoder().bert, 3, "sum-all", lstm_units=8, seed=1)
    cached = FeatureTagger(tiny_encoder().bert, 3, "sum-all", lstm_units=8, seed=1)
    with_layers = cache_layers(
        cached, features, collate_tokens, batch_size=3, device=torch.device("cpu"), precision="fp32"
    )
    assert with_layers[0]["layers"].shape == (len(features[0]["input_ids"]), LAYERS, 32)
    a = fit(live, features, config, collate_fn=collate_tokens)
    b = fit(cached, with_layers, config, collate_fn=collate_with_layers(collate_tokens))
    assert a.epoch_losses == pytest.approx(b.epoch_losses, rel=1e-5)
    for (name, p), q in zip(live.named_parameters(), cached.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6, msg=name)


def test_bilstm_outputs_do_not_depend_on_padding():
    lstm = BiLSTM(8, 6, seed=0).eval()
    x = torch.randn(1, 5, 8, generator=torch.Generator().manual_seed(0))
    alone = lstm(x, torch.ones(1, 5, dtype=torch.long))
    padded = torch.cat([x, torch.randn(1, 4, 8)], dim=1)
    mask = torch.tensor([[1] * 5 + [0] * 4])
    out = lstm(padded, mask)
    assert out.shape == (1, 9, 12)
    torch.testing.assert_close(out[:, :5], alone, rtol=0, atol=1e-6)
    assert torch.equal(out[:, 5:], torch.zeros(1, 4, 12))
    assert torch.equal(BiLSTM(8, 6, seed=0).lstm.weight_ih_l0, BiLSTM(8, 6, seed=0).lstm.weight_ih_l0)


def _with_spans(features: list[dict]) -> list[dict]:
    """Each feature's middle as its sentence; the rest is context the head must not see."""
    out = []
    for f in features:
        n = len(f["input_ids"])
        labels = [-100] * n
        labels[2 : n - 2] = f["labels"][2 : n - 2]
        out.append({**f, "labels": labels, "sentence_start": 2, "sentence_end": n - 2})
    return out


def test_the_head_runs_over_the_sentence_span_only():
    features = _with_spans(_features(6))
    tagger = FeatureTagger(tiny_encoder().bert, 3, "last", lstm_units=8, seed=0).eval()
    batch = collate_tokens(features)
    with torch.no_grad():
        spanned = tagger(**batch)
        window = tagger.encoder_layers(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"])
    lengths = [f["sentence_end"] - f["sentence_start"] for f in features]
    assert spanned.logits.shape[1] == max(lengths)
    for row, f in enumerate(features):
        # the sentence alone through the head (its encoder activations taken in the window)
        alone = window[row : row + 1, f["sentence_start"] : f["sentence_end"]]
        with torch.no_grad():
            want = tagger.classifier(tagger.bilstm(tagger.head_inputs(alone)))
        torch.testing.assert_close(spanned.logits[row : row + 1, : lengths[row]], want, rtol=0, atol=1e-5)
    # the loss is over the sentence's labels only: the same as the live window's masked loss
    assert spanned.loss is not None and torch.isfinite(spanned.loss)


def test_cached_sentence_spans_train_exactly_like_the_live_window():
    features = _with_spans(_features(10))
    config = FitConfig(epochs=2, lr=1e-2, batch_size=4, seed=3, device="cpu", progress=False)
    live = FeatureTagger(tiny_encoder().bert, 3, "concat-last-4", lstm_units=8, seed=1)
    cached = FeatureTagger(tiny_encoder().bert, 3, "concat-last-4", lstm_units=8, seed=1)
    cut = cache_layers(
        cached, features, collate_tokens, batch_size=3, device=torch.device("cpu"), precision="fp32"
    )
    n = len(features[0]["input_ids"])
    assert cut[0]["layers"].shape == (n - 4, 4, 32) and len(cut[0]["input_ids"]) == n - 4
    assert "sentence_start" not in cut[0] and cut[0]["labels"] == features[0]["labels"][2 : n - 2]
    a = fit(live, features, config, collate_fn=collate_tokens)
    b = fit(cached, cut, config, collate_fn=collate_with_layers(collate_tokens))
    assert a.epoch_losses == pytest.approx(b.epoch_losses, rel=1e-5)
    for (name, p), q in zip(live.named_parameters(), cached.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-6, msg=name)
