"""SWAG reader on the real rows in ../shared/data, its features, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from finetune.encoder import load_encoder
from finetune.swag import features, read_swag
from schemas.commands import CommandError
from tests.conftest import SHARED_DATA, require

SWAG = SHARED_DATA / "swag"


def test_allennlp_fixture_val_layout():
    examples = read_swag(str(require(SWAG / "allennlp-models_test_fixtures_swag.csv")), labelled=True)
    assert len(examples) == 11
    first = examples[0]
    assert first.context == "Students lower their eyes nervously." and first.start == "She"
    assert first.endings[0] == "pats her shoulder, then saunters toward someone."  # quoted field with a comma
    assert first.label == 2 and first.index == "0"
    assert all(len(e.endings) == 4 and e.label in range(4) for e in examples)


def test_hf_regular_layout_train_val_and_unlabelled_test():
    folder = require(SWAG / "hf_dummy" / "regular")
    train = read_swag(str(folder / "train.csv"), labelled=True)
    test = read_swag(str(folder / "test.csv"), labelled=False)
    assert train and all(e.label is not None for e in train)
    assert test and all(e.label is None for e in test)
    assert test[0].start == "Then, the person"
    with pytest.raises(CommandError, match=r"test\.csv:1: no column 'label'"):
        read_swag(str(folder / "test.csv"), labelled=True)


def test_full_layout_is_refused_with_a_clear_message():
    path = require(SWAG / "hf_dummy" / "full" / "val_full.csv")
    with pytest.raises(CommandError, match=r"no column 'ending0'.*regular layout"):
        read_swag(str(path), labelled=True)


def test_bad_label_names_file_and_line(tmp_path: Path):
    path = tmp_path / "val.csv"
    header = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3,label\n"
    path.write_text(header + '0,v,1,"A b. C",A b.,C,gold,"x, y",e1,e2,e3,1\n1,v,2,s,A,C,gold,e0,e1,e2,e3,4\n')
    with pytest.raises(CommandError, match=r"val\.csv:3: label '4' is not one of 0, 1, 2, 3"):
        read_swag(str(path), labelled=True)


def test_features_are_four_pairs_of_context_and_start_plus_ending(tmp_path: Path):
    vocab = require(SHARED_DATA / "vocab" / "bert-base-uncased_vocab.txt").read_text().splitlines()
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    examples = read_swag(str(require(SWAG / "allennlp-models_test_fixtures_swag.csv")), labelled=True)
    from pretrain.model import BertConfig, BertForPreTraining

    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
    )
    BertForPreTraining(config).save_pretrained(folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True}))
    encoder = load_encoder(str(folder))
    feature = features(examples[:1], encoder, 32)[0]
    assert len(feature["input_ids"]) == 4 and feature["labels"] == 2
    tokens = [encoder.tokenizer.vocab[i] for i in feature["input_ids"][2]]
    assert (
        tokens
        == "[CLS] students lower their eyes nervously . [SEP] she walks slowly towards someone . [SEP]".split()
    )
    assert feature["token_type_ids"][2] == [0] * 8 + [1] * 7
