"""finetune's encoder, sequences, heads and loop on a tiny BERT made in code: loading checkpoints,
tokenising, padding a batch, the training loop and prediction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from finetune.config import FitConfig
from finetune.encoder import load_encoder
from finetune.heads import Classifier
from finetune.loop import epoch_order, fit, predict_classes
from finetune.sequences import encode_pair, pad_batch, truncate_pair
from pretrain import checkpoint as ckpt
from pretrain.model import BertConfig, BertForPreTraining
from schemas import storage
from schemas.commands import CommandError, UsageError

WORDS = "the a movie film was is good bad great awful plot acting very not".split()
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS, "##s"]


def tiny_model() -> BertForPreTraining:
    config = BertConfig(
        vocab_size=len(VOCAB),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    return BertForPreTraining(config, seed=0)


def hf_folder(path: Path, vocab: list[str] = VOCAB, lower_case: bool = True) -> Path:
    tiny_model().save_pretrained(path)
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    (path / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": lower_case}))
    return path


@pytest.fixture
def encoder(tmp_path: Path):
    return load_encoder(str(hf_folder(tmp_path / "hf")))


def test_load_hf_folder_takes_casing_from_tokenizer_config(tmp_path: Path):
    uncased = load_encoder(str(hf_folder(tmp_path / "a")))
    assert uncased.cased is False and uncased.tokenizer.vocab_size == len(VOCAB)
    assert uncased.tokenizer.encode("The MOVIE") == [VOCAB.index("the"), VOCAB.index("movie")]
    cased = load_encoder(str(hf_folder(tmp_path / "b", lower_case=False)))
    assert cased.cased is True
    assert load_encoder(str(tmp_path / "a"), cased=True).cased is True


def test_vocabulary_that_does_not_match_the_model_is_refused(tmp_path: Path):
    folder = hf_folder(tmp_path / "hf", vocab=[*VOCAB, "extra"])
    with pytest.raises(
        CommandError, match=r"vocab\.txt has 21 tokens but the word embeddings .* have 20 rows"
    ):
        load_encoder(str(folder))
    (folder / "vocab.txt").unlink()
    with pytest.raises(CommandError, match=r"vocab\.txt not found"):
        load_encoder(str(folder))
    with pytest.raises(CommandError, match="config.json not found"):
        load_encoder(str(tmp_path / "nothing"))


def _pretrain_checkpoint(run: Path, step: int, cased: bool, commit: bool = True) -> str:
    url = ckpt.step_url(str(run), step)
    folder = Path(url)
    tiny_model().save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    ckpt.save_state({"step": step, "cased": cased}, storage.Folder(url), ckpt.TRAINER_STATE)
    if commit:
        ckpt.commit(storage.Folder(url), step)
    return url


def test_pretrain_run_folder_resolves_to_the_newest_complete_checkpoint(tmp_path: Path):
    run = tmp_path / "run"
    _pretrain_checkpoint(run, 10, cased=True)
    _pretrain_checkpoint(run, 20, cased=True, commit=False)  # an interrupted save
    encoder = load_encoder(str(run))
    assert encoder.source.endswith("step-00000010") and encoder.cased is True
    assert load_encoder(ckpt.step_url(str(run), 10)).cased is True
    with pytest.raises(CommandError, match="not a complete checkpoint"):
        load_encoder(ckpt.step_url(str(run), 20))
    (tmp_path / "empty" / "checkpoints").mkdir(parents=True)
    with pytest.raises(CommandError, match="no complete checkpoint"):
        load_encoder(str(tmp_path / "empty"))


def test_truncate_pair_drops_from_the_longer_side():
    assert truncate_pair([1, 2, 3, 4, 5], [6, 7], 5) == ([1, 2, 3], [6, 7])
    assert truncate_pair([1, 2], [3, 4], 3) == ([1, 2], [3])  # ties: from b
    assert truncate_pair([1], [2], 5) == ([1], [2])


def test_encode_pair_layout_and_truncation(encoder):
    cls_id, sep_id = VOCAB.index("[CLS]"), VOCAB.index("[SEP]")
    single = encode_pair(encoder.tokenizer, "the movie", None, 16)
    assert single["input_ids"] == [cls_id, VOCAB.index("the"), VOCAB.index("movie"), sep_id]
    assert single["token_type_ids"] == [0, 0, 0, 0]
    pair = encode_pair(encoder.tokenizer, "the movie was very good", "bad plot", 8)
    assert len(pair["input_ids"]) == 8
    assert pair["input_ids"][-3:] == [VOCAB.index("bad"), VOCAB.index("plot"), sep_id]
    assert pair["token_type_ids"] == [0, 0, 0, 0, 0, 1, 1, 1]
    assert encode_pair(encoder.tokenizer, "good " * 30, None, 10)["input_ids"][-1] == sep_id


def test_collate_pads_to_the_longest_in_the_batch():
    features = [
        {"input_ids": [2, 5, 3], "token_type_ids": [0, 0, 0], "labels": 1},
        {"input_ids": [2, 5, 6, 7, 3], "token_type_ids": [0, 0, 0, 1, 1], "labels": 0},
    ]
    batch = pad_batch(features)
    assert batch["input_ids"].tolist() == [[2, 5, 3, 0, 0], [2, 5, 6, 7, 3]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 0, 0, 0], [0, 0, 0, 1, 1]]
    assert batch["labels"].dtype == torch.long
    assert pad_batch([{**features[0], "labels": 2.5}])["labels"].dtype == torch.float32
    assert pad_batch(features[:1])["input_ids"].shape == (1, 3)  # no padding to a fixed length


def test_collate_pads_further_token_keys_with_their_own_value():
    features = [
        {"input_ids": [2, 5, 3], "token_type_ids": [0, 0, 0], "labels": [-100, 4, -100], "id": 7},
        {"input_ids": [2, 3], "token_type_ids": [0, 0], "labels": [-100, -100], "id": 8},
    ]
    batch = pad_batch(features, pad_id=1, token_pads={"labels": -100})
    assert batch["input_ids"].tolist() == [[2, 5, 3], [2, 3, 1]]
    assert batch["token_type_ids"].tolist() == [[0, 0, 0], [0, 0, 0]]
    assert batch["labels"].tolist() == [[-100, 4, -100], [-100, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["id"].tolist() == [7, 8]


def test_the_shared_range_checks_list_each_problem_once():
    from pretrain.config import non_negative_finite, positive_finite

    problems: list[str] = []
    for value in (1e-4, 0.0, -1.0, float("nan"), float("inf")):
        positive_finite("--lr", value, problems)
        non_negative_finite("--weight-decay", value, problems)
    assert problems == [
        "--lr must be positive and finite, got 0.0",
        "--lr must be positive and finite, got -1.0",
        "--weight-decay must not be negative (and finite), got -1.0",
        "--lr must be positive and finite, got nan",
        "--weight-decay must not be negative (and finite), got nan",
        "--lr must be positive and finite, got inf",
        "--weight-decay must not be negative (and finite), got inf",
    ]


def test_collate_multiple_choice():
    features = [
        {"input_ids": [[2, 3], [2, 5, 3]], "token_type_ids": [[0, 0], [0, 0, 1]], "labels": 1},
        {"input_ids": [[2, 5, 6, 3], [2, 3]], "token_type_ids": [[0, 0, 1, 1], [0, 0]], "labels": 0},
    ]
    batch = pad_batch(features)
    assert batch["input_ids"].shape == (2, 2, 4)
    assert batch["input_ids"][0, 0].tolist() == [2, 3, 0, 0]
    assert batch["attention_mask"][1].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert batch["labels"].tolist() == [1, 0]


def test_fit_config_lists_every_problem():
    with pytest.raises(UsageError) as err:
        FitConfig(epochs=0, lr=-1, batch_size=0, precision="fp8", device="gpu:x").checked()
    message = str(err.value)
    assert all(flag in message for flag in ("--epochs", "--lr", "--batch-size", "--precision", "--device"))
    assert FitConfig().problems() == []


def test_fine_tuning_and_feature_extraction_refuse_a_precision_in_one_line():
    from finetune.extract import ExtractSettings

    line = "--precision must be one of auto, fp32, bf16, fp16, got 'fp8'"
    assert FitConfig(precision="fp8").problems() == [line]
    with pytest.raises(UsageError, match=f"^{line}$"):
        ExtractSettings(precision="fp8")


def test_epoch_order_is_a_function_of_seed_and_epoch():
    assert epoch_order(50, 1, 0) == epoch_order(50, 1, 0)
    assert epoch_order(50, 1, 0) != epoch_order(50, 1, 1)
    assert epoch_order(50, 1, 0) != epoch_order(50, 2, 0)
    assert sorted(epoch_order(50, 1, 3)) == list(range(50))


def _sentiment(encoder, n: int = 64) -> list[dict]:
    good = ["good", "great"]
    bad = ["bad", "awful"]
    features = []
    for i in range(n):
        label = i % 2
        word = (good if label else bad)[(i // 2) % 2]
        text = f"the {['movie', 'film', 'plot', 'acting'][i % 4]} was {'very ' * (i % 3)}{word}"
        features.append({**encode_pair(encoder.tokenizer, text, None, 32), "labels": label})
    return features


@pytest.mark.slow
def test_fit_learns_and_is_reproducible(encoder):
    features = _sentiment(encoder, 32)
    config = FitConfig(epochs=14, lr=1e-3, batch_size=4, seed=3, eval_batch_size=5, progress=False)
    pretrained = {k: v.clone() for k, v in encoder.model.state_dict().items()}
    model = Classifier(encoder.model, 2, seed=3)
    result = fit(model, features, config)
    assert result.steps == 14 * 8 and len(result.epoch_losses) == 14
    assert result.epoch_losses[-1] < 0.5 * result.epoch_losses[0]
    predictions = predict_classes(model, features, config).argmax(-1).tolist()
    assert sum(p == f["labels"] for p, f in zip(predictions, features, strict=True)) >= 28
    trained = {k: v.clone() for k, v in model.state_dict().items()}

    encoder.model.load_state_dict(pretrained)
    again = Classifier(encoder.model, 2, seed=3)
    fit(again, features, config)
    assert all(torch.equal(trained[k], v) for k, v in again.state_dict().items())


def test_fractional_epochs_reproducible_weights_and_global_rng_left_alone(encoder):
    features = _sentiment(encoder, 20)
    config = FitConfig(epochs=1.5, batch_size=4, progress=False)
    pretrained = {k: v.clone() for k, v in encoder.model.state_dict().items()}
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    model = Classifier(encoder.model, 2)
    result = fit(model, features, config)
    assert result.steps == 8 and len(result.epoch_losses) == 2
    assert torch.equal(torch.rand(3), expected)
    trained = {k: v.clone() for k, v in model.state_dict().items()}
    encoder.model.load_state_dict(pretrained)
    again = Classifier(encoder.model, 2)
    fit(again, features, config)
    assert all(torch.equal(trained[k], v) for k, v in again.state_dict().items())


def test_predict_returns_outputs_in_feature_order(encoder):
    features = _sentiment(encoder, 13)
    model = Classifier(encoder.model, 3, seed=1)
    batched = predict_classes(model, features, FitConfig(eval_batch_size=4, progress=False))
    single = FitConfig(eval_batch_size=1, progress=False)
    one_by_one = torch.cat([predict_classes(model, [f], single) for f in features])
    assert batched.shape == (13, 3)
    torch.testing.assert_close(batched, one_by_one, atol=1e-5, rtol=1e-5)


def test_regression_and_multiple_choice_heads(encoder):
    regression = Classifier(encoder.model, 1)
    batch = pad_batch([{**encode_pair(encoder.tokenizer, "good", "bad", 16), "labels": 2.5}] * 2)
    output = regression(**batch)
    assert output.logits.shape == (2,) and output.loss.ndim == 0
    choice = Classifier(encoder.model, 1, per="choice")
    feature = {
        "input_ids": [[2, 5, 3], [2, 6, 7, 3], [2, 3], [2, 8, 3]],
        "token_type_ids": [[0] * 3, [0] * 4, [0] * 2, [0] * 3],
    }
    output = choice(**pad_batch([{**feature, "labels": 3}] * 3))
    assert output.logits.shape == (3, 4)
    assert output.loss.item() == pytest.approx(
        torch.nn.functional.cross_entropy(output.logits, torch.tensor([3, 3, 3])).item()
    )
