"""The one masking rule (wordpiece/masking.py): the three replacement shares, the reference's
exclusions, and the static writer and the dynamic collate giving the same masks."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pretrain.collate import DynamicMasking, collate, masking_from_params
from pretrain.config import PretrainConfig
from schemas.examples import examples_format
from wordpiece.masking import NEVER_MASKED, MaskingConfig, MaskingVocab, mask_batch

TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "[unused0]"] + [f"w{i}" for i in range(994)]
MASK_ID = 4
POOL = range(6, 1000)
VOCAB = MaskingVocab.build(TOKENS, POOL)
FMT = examples_format(1000)


def _rows(num_rows: int, length: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    body = rng.integers(6, 1000, size=(num_rows, length - 2))
    seqs = np.concatenate([np.full((num_rows, 1), 2), body, np.full((num_rows, 1), 3)], axis=1)
    lengths = np.full(num_rows, length)
    return seqs.reshape(-1), np.arange(num_rows) * length, lengths


# The paper's Table 8 rows: [MASK] / same / random.
TABLE_8 = [
    (0.8, 0.1, 0.1),
    (1.0, 0.0, 0.0),
    (0.8, 0.0, 0.2),
    (0.8, 0.2, 0.0),
    (0.0, 0.2, 0.8),
    (0.0, 0.0, 1.0),
]


@pytest.mark.parametrize("shares", TABLE_8)
def test_measured_shares_are_within_binomial_tolerance(shares):
    mask, keep, random_ = shares
    ids, starts, lengths = _rows(1000, 128)
    keys = np.arange(1, 1001, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    config = MaskingConfig(mask_share=mask, keep_share=keep, random_share=random_)
    masked = mask_batch(ids, starts, lengths, keys, config, VOCAB)
    n = int(masked.num_predictions.sum())
    assert n == 1000 * 19  # round(128 * 0.15)
    # A random token equals the original with probability 1/|pool|: it then reads as unchanged.
    expected = {
        "mask": mask,
        "unchanged": keep + random_ / len(POOL),
        "random": random_ * (1 - 1 / len(POOL)),
    }
    measured = {
        "mask": masked.num_to_mask.sum() / n,
        "unchanged": masked.num_unchanged.sum() / n,
    }
    measured["random"] = 1 - measured["mask"] - measured["unchanged"]
    for name, p in expected.items():
        # 5 binomial standard deviations (a false failure about once in 3.5 million runs).
        tolerance = 5 * math.sqrt(p * (1 - p) / n) + 1e-12
        assert abs(measured[name] - p) <= tolerance, (name, measured[name], p, tolerance)
    replaced = masked.input_ids[starts[np.repeat(np.arange(1000), masked.num_predictions)] + masked.positions]
    changed = (replaced != MASK_ID) & (replaced != masked.labels)
    assert np.isin(replaced[changed], np.asarray(POOL)).all()  # from the one pool


def test_shares_are_validated_together():
    with pytest.raises(ValueError) as err:
        MaskingConfig(mask_share=1.2, keep_share=-0.1, random_share=0.1)
    message = str(err.value)
    assert "--mask-share must be in [0, 1]" in message and "--keep-share must be in [0, 1]" in message
    with pytest.raises(ValueError, match="must sum to 1"):
        MaskingConfig(mask_share=0.8, keep_share=0.1, random_share=0.2)


def test_only_cls_and_sep_are_never_masked_as_in_the_reference():
    assert NEVER_MASKED == {"[CLS]", "[SEP]"}
    seqs = np.array([2] + [1] * 20 + [3])  # [UNK] may be predicted, as in the reference
    masked = mask_batch(seqs, np.array([0]), np.array([22]), np.array([7], np.uint64), MaskingConfig(), VOCAB)
    assert masked.num_predictions.tolist() == [3] and (masked.labels == 1).all()


def _table(ids: np.ndarray, lengths: np.ndarray):
    rows, start = [], 0
    for uid, n in enumerate(lengths.tolist()):
        rows.append(
            {
                "input_ids": ids[start : start + n].tolist(),
                "masked_lm_positions": [],
                "masked_lm_ids": [],
                "next_sentence_labels": 0,
                "num_tokens_a": n // 2,
                "num_tokens": n,
                "doc_id": str(uid),
                "dupe_index": 0,
            }
        )
        start += n
    return FMT.to_table(rows)


def test_static_and_dynamic_masking_are_one_implementation():
    """The collate's masks are exactly mask_batch's for the keys drawn from its generator."""
    ids, starts, lengths = _rows(50, 40, seed=3)
    lengths = lengths.copy()
    config = MaskingConfig(
        masked_lm_prob=0.2, whole_word_masking=True, mask_share=0.5, keep_share=0.3, random_share=0.2
    )
    batch = collate(
        _table(ids, lengths), DynamicMasking.from_vocab(TOKENS, config), np.random.default_rng(11)
    )
    keys = np.random.default_rng(11).integers(0, np.iinfo(np.int64).max, size=50, dtype=np.int64)
    static = mask_batch(ids, starts, lengths, keys.astype(np.uint64), config, VOCAB)
    assert np.array_equal(batch["input_ids"][:, :40].numpy().reshape(-1), static.input_ids)
    weights = batch["masked_lm_weights"].bool()
    assert np.array_equal(batch["masked_lm_positions"][weights].numpy(), static.positions)
    assert np.array_equal(batch["masked_lm_ids"][weights].numpy(), static.labels)


def test_dynamic_masking_at_512_takes_the_shards_settings():
    params = {
        "masking_settings": {
            "masked_lm_prob": 0.15,
            "max_predictions_per_seq": 80,
            "mask_share": 0.8,
            "keep_share": 0.1,
            "random_share": 0.1,
            "whole_word_masking": False,
        },
        "masking": False,
    }
    settings = masking_from_params(params)
    ids, _, lengths = _rows(8, 512)
    batch = collate(
        _table(ids, lengths), DynamicMasking.from_vocab(TOKENS, settings), np.random.default_rng(0)
    )
    predicted = batch["masked_lm_weights"].sum().item() / (8 * 512)
    assert abs(predicted - 0.15) < 0.002  # round(512 * 0.15) = 77 of 512, not the default 20
    assert (
        masking_from_params(params, max_predictions_per_seq=20, mask_share=None).max_predictions_per_seq == 20
    )
    # Without recorded settings the defaults apply.
    assert masking_from_params({}) == MaskingConfig()


def test_masking_flags_need_dynamic_masking():
    cfg = PretrainConfig(shards="x", output="y", mask_share=1.0)
    assert any("--mask-share applies to --dynamic-masking only" in p for p in cfg.problems())
    assert not PretrainConfig(shards="x", output="y", mask_share=1.0, dynamic_masking=True).problems()
