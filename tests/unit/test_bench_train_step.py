"""The helpers of benchmarks/train_step.py that decide what the transformers peer is fed: the
reader's examples with their written masks undone, collated by transformers' own collator."""

from __future__ import annotations

import argparse

import pytest
import torch

from benchmarks.train_step import VOCAB, parse_config, peer_collator, unmasked_features
from tests.conftest import require


def reader_batch() -> dict[str, torch.Tensor]:
    """Two examples as the reader pads them (width 8): lengths 7 and 5, masks written in place."""
    original = torch.tensor(
        [[101, 2023, 2003, 102, 1037, 3231, 102, 0], [101, 7592, 102, 2088, 102, 0, 0, 0]]
    )
    masked = original.clone()
    masked[0, 2], masked[0, 5], masked[1, 3] = 103, 103, 4242  # [MASK], [MASK], a random token
    return {
        "input_ids": masked,
        "attention_mask": (torch.arange(8)[None, :] < torch.tensor([[7], [5]])).long(),
        "token_type_ids": torch.tensor([[0, 0, 0, 0, 1, 1, 1, 0], [0, 0, 0, 1, 1, 0, 0, 0]]),
        "masked_lm_positions": torch.tensor([[2, 5], [3, 0]]),
        "masked_lm_ids": torch.tensor([[2003, 3231], [2088, 0]]),
        "masked_lm_weights": torch.tensor([[1.0, 1.0], [1.0, 0.0]]),
        "next_sentence_labels": torch.tensor([1, 0]),
        "original": original,
    }


def test_unmasked_features_restore_the_original_tokens_unpadded():
    batch = reader_batch()
    features = unmasked_features(batch)
    assert [f["input_ids"] for f in features] == [
        batch["original"][0, :7].tolist(),
        batch["original"][1, :5].tolist(),
    ]
    assert [f["token_type_ids"] for f in features] == [[0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1]]
    assert [f["next_sentence_label"] for f in features] == [1, 0]
    # the padding slot (weight 0, position 0) must not overwrite [CLS]
    assert features[1]["input_ids"][0] == 101


def test_the_peer_collator_pads_to_the_batch_longest_or_to_128():
    require(VOCAB)
    features = unmasked_features(reader_batch())
    longest = peer_collator(None)(features)
    assert longest["input_ids"].shape == (2, 7)
    assert longest["attention_mask"].sum(1).tolist() == [7, 5]
    assert set(longest) >= {"labels", "next_sentence_label", "token_type_ids"}
    # the collator keeps [CLS]/[SEP] out of its masking: it knows the vocabulary's special tokens
    assert (longest["labels"][:, 0] == -100).all()
    assert peer_collator(128)(features)["input_ids"].shape == (2, 128)


def test_parse_config_takes_name_and_batch():
    assert parse_config("base:8") == ("base", 8)
    assert parse_config("12/768/12:4") == ("12/768/12", 4)
    for bad in ("base", "base:0", ":8"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_config(bad)
