"""Masked-LM selection (reference semantics) and the examples schema."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from schemas.commands import InputError
from schemas.examples import examples_format, id_type
from wordpiece.masking import MaskingConfig, MaskingVocab, mask_batch

MASK_ID = 3
# A toy vocabulary: 0-4 special, then words ("wN") and continuation pieces ("##wN").
TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[MASK]", "[SEP]"] + [
    f"##w{i}" if i % 3 == 0 else f"w{i}" for i in range(5, 3000)
]
VOCAB = MaskingVocab.build(TOKENS, range(1000, 2000), never_masked=frozenset(TOKENS[:5]))
CLS, SEP = 2, 4


def _sequence(n: int, offset: int = 0) -> list[int]:
    """[CLS] A [SEP] B [SEP] of length n with distinct word ids (every third a ## piece)."""
    body = [5 + (offset + i) % 2990 for i in range(n - 3)]
    half = len(body) // 2
    return [CLS, *body[:half], SEP, *body[half:], SEP]


def _mask(sequences: list[list[int]], keys, config: MaskingConfig | None = None):
    config = config or MaskingConfig()
    lengths = np.array([len(s) for s in sequences])
    starts = np.cumsum(lengths) - lengths
    ids = np.concatenate([np.array(s, dtype=np.int32) for s in sequences])
    return ids, starts, lengths, mask_batch(ids, starts, lengths, np.asarray(keys, np.uint64), config, VOCAB)


def _per_sequence(masked, starts, lengths):
    ends = np.cumsum(masked.num_predictions)
    out = []
    for i, (start, length) in enumerate(zip(starts, lengths, strict=True)):
        first = ends[i] - masked.num_predictions[i]
        out.append(
            (
                masked.input_ids[start : start + length].tolist(),
                masked.positions[first : ends[i]].tolist(),
                masked.labels[first : ends[i]].tolist(),
            )
        )
    return out


@pytest.mark.parametrize("whole_word_masking", [False, True])
def test_same_key_same_masks_in_any_batch_and_specials_never_masked(whole_word_masking):
    config = MaskingConfig(whole_word_masking=whole_word_masking)
    sequences = [_sequence(128, k) for k in range(6)]
    ids, starts, lengths, masked = _mask(sequences, range(6), config)
    rows = _per_sequence(masked, starts, lengths)
    # Masked alone, or in another batch order, a sequence comes out the same.
    _, s1, l1, alone = _mask([sequences[4]], [4], config)
    assert _per_sequence(alone, s1, l1) == [rows[4]]
    _, s2, l2, reordered = _mask(sequences[::-1], list(range(6))[::-1], config)
    assert _per_sequence(reordered, s2, l2) == rows[::-1]
    _, s3, l3, other_key = _mask([sequences[4]], [99], config)
    assert _per_sequence(other_key, s3, l3) != [rows[4]]
    for sequence, (output, positions, labels) in zip(sequences, rows, strict=True):
        assert len(positions) == min(20, round(128 * 0.15)) == 19
        assert positions == sorted(set(positions))
        assert all(sequence[p] not in (CLS, SEP) for p in positions)
        assert labels == [sequence[p] for p in positions]
        untouched = set(range(128)) - set(positions)
        assert all(output[p] == sequence[p] for p in untouched)


def test_short_sequences_predict_at_least_one_and_cap_applies():
    _, starts, lengths, masked = _mask([_sequence(5)], [0])
    assert masked.num_predictions.tolist() == [1]
    _, starts, lengths, masked = _mask([_sequence(512)], [0], MaskingConfig(max_predictions_per_seq=76))
    assert masked.num_predictions.tolist() == [76]
    # Rounding half to even, as Python's round: 10 tokens x 0.15 = 1.5 -> 2; 30 x 0.15 = 4.5 -> 4.
    _, _, _, masked = _mask([_sequence(10), _sequence(30)], [0, 1])
    assert masked.num_predictions.tolist() == [2, 4]


def test_every_candidate_is_equally_likely():
    # 4,000 sequences of 20 tokens (17 candidates, 3 chosen): each candidate is chosen with
    # probability 3/17 = 0.176; over 4,000 draws its s.e. is 0.006, so 0.03 is five of them.
    sequence = _sequence(20)
    _, _, _, masked = _mask([sequence] * 4000, range(4000))
    assert (masked.num_predictions == 3).all()
    counts = np.bincount(masked.positions, minlength=20)
    special = [p for p, i in enumerate(sequence) if i in (CLS, SEP)]
    assert len(special) == 3 and not counts[special].any()
    shares = counts[[p for p in range(20) if p not in special]] / 4000
    assert np.abs(shares - 3 / 17).max() < 0.03


def test_replacements_split_80_10_10():
    # 20,000 chosen positions: the standard error of a share p is sqrt(p(1-p)/n) <= 0.0035,
    # so 0.015 is more than four standard errors.
    sequences = [_sequence(140, k) for k in range(1000)]
    ids, starts, _, masked = _mask(sequences, range(1000))
    owner = np.repeat(np.arange(1000), masked.num_predictions)
    flat = starts[owner] + masked.positions
    new, old = masked.input_ids[flat], ids[flat]
    total = len(flat)
    assert total == 20_000
    mask, same = np.count_nonzero(new == MASK_ID), np.count_nonzero(new == old)
    random_ = total - mask - same
    assert abs(mask / total - 0.8) < 0.015
    assert abs(random_ / total - 0.1) < 0.015
    assert abs(same / total - 0.1) < 0.015
    replaced = new[(new != MASK_ID) & (new != old)]
    assert ((replaced >= 1000) & (replaced < 2000)).all()  # from the replacement pool only
    assert masked.num_to_mask.sum() == mask and masked.num_unchanged.sum() == same


def test_whole_word_masking_takes_whole_words():
    # [CLS] un ##believ ##able story [SEP]: the words are {1, 2, 3} and {4}.
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[MASK]", "[SEP]", "un", "##believ", "##able", "story"]
    vocab = MaskingVocab.build(tokens, range(5, 9), never_masked=frozenset(tokens[:5]))
    ids = np.array([2, 5, 6, 7, 8, 4], dtype=np.int32)
    seen = set()
    for key in range(200):
        masked = mask_batch(
            ids,
            np.array([0]),
            np.array([6]),
            np.array([key], np.uint64),
            MaskingConfig(masked_lm_prob=0.5, whole_word_masking=True),
            vocab,
        )
        seen.add(tuple(masked.positions.tolist()))
    assert seen == {(1, 2, 3), (4,)}  # 3 to predict: the 3-piece word, or the 1-piece one


def test_whole_word_masking_fills_up_to_the_number_to_predict():
    sequences = [_sequence(128, k) for k in range(200)]
    _, starts, lengths, masked = _mask(sequences, range(200), MaskingConfig(whole_word_masking=True))
    for sequence, (_, positions, _) in zip(sequences, _per_sequence(masked, starts, lengths), strict=True):
        assert len(positions) == 19  # words of 1-2 pieces always fill the 19 exactly
        chosen = set(positions)
        for p in positions:  # a chosen ## piece comes with the piece before it, and vice versa
            if TOKENS[sequence[p]].startswith("##") and sequence[p - 1] not in (CLS, SEP):
                assert p - 1 in chosen
            if p + 1 < len(sequence) and TOKENS[sequence[p + 1]].startswith("##"):
                assert p + 1 in chosen


def test_masking_config_lists_problems():
    with pytest.raises(ValueError, match="--masked-lm-prob.*--max-predictions-per-seq"):
        MaskingConfig(masked_lm_prob=1.5, max_predictions_per_seq=0)


def _example(**overrides):
    row = {
        "input_ids": [101, 7, 102, 8, 102],
        "masked_lm_positions": [1],
        "masked_lm_ids": [9],
        "next_sentence_labels": 0,
        "num_tokens_a": 3,
        "num_tokens": 5,
        "doc_id": "0" * 32,
        "dupe_index": 0,
    }
    row.update(overrides)
    return row


def test_examples_schema_uses_the_narrowest_id_type_and_checks_rows():
    assert id_type(30522) == pa.uint16() and id_type(65536) == pa.uint16() and id_type(65537) == pa.uint32()
    fmt = examples_format(30522)
    data = fmt.to_ipc_bytes(fmt.to_table([_example()]), "e.arrow")
    assert fmt.read_ipc(data, "e.arrow").to_pylist() == [_example()]
    with pytest.raises(InputError, match="num_tokens says otherwise"):
        fmt.to_table([_example(num_tokens=6)], "e.arrow")
    with pytest.raises(InputError, match="another number of masked_lm_ids"):
        fmt.to_table([_example(masked_lm_ids=[])], "e.arrow")
    with pytest.raises(InputError, match="columns do not match"):
        examples_format(70000).read_ipc(data, "e.arrow")
