"""Masked-LM selection (reference semantics) and the examples schema."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from pipelines.examples.masking import MaskingConfig, candidate_groups, mask_tokens
from schemas import SchemaError
from schemas.examples import examples_format, id_type

SPECIAL = frozenset({"[CLS]", "[SEP]"})
MASK_ID = 103
RANDOM_IDS = list(range(1000, 2000))


def _sequence(n: int) -> tuple[list[int], list[str]]:
    tokens = ["[CLS]", *[f"w{i}" if i % 3 else f"##w{i}" for i in range(n - 3)], "[SEP]", "[SEP]"]
    tokens[-2 - (n - 3) // 2] = "[SEP]"  # an A/B boundary in the middle
    return list(range(5000, 5000 + n)), tokens


def test_same_seed_same_masks_and_specials_never_masked():
    ids, tokens = _sequence(128)
    config = MaskingConfig()
    first = mask_tokens(
        ids,
        tokens,
        config=config,
        mask_id=MASK_ID,
        random_ids=RANDOM_IDS,
        special=SPECIAL,
        rng=random.Random(7),
    )
    again = mask_tokens(
        ids,
        tokens,
        config=config,
        mask_id=MASK_ID,
        random_ids=RANDOM_IDS,
        special=SPECIAL,
        rng=random.Random(7),
    )
    assert first == again
    assert len(first.positions) == min(20, round(128 * 0.15)) == 19
    assert first.positions == sorted(first.positions)
    assert all(tokens[p] not in SPECIAL for p in first.positions)
    assert first.labels == [ids[p] for p in first.positions]
    untouched = set(range(128)) - set(first.positions)
    assert all(first.input_ids[p] == ids[p] for p in untouched)


def test_short_sequences_predict_at_least_one_and_cap_applies():
    ids, tokens = _sequence(5)
    masked = mask_tokens(
        ids,
        tokens,
        config=MaskingConfig(),
        mask_id=MASK_ID,
        random_ids=RANDOM_IDS,
        special=SPECIAL,
        rng=random.Random(0),
    )
    assert len(masked.positions) == 1
    ids, tokens = _sequence(512)
    masked = mask_tokens(
        ids,
        tokens,
        config=MaskingConfig(max_predictions_per_seq=76),
        mask_id=MASK_ID,
        random_ids=RANDOM_IDS,
        special=SPECIAL,
        rng=random.Random(0),
    )
    assert len(masked.positions) == 76


def test_replacements_split_80_10_10():
    # 20,000 chosen positions: the standard error of a share p is sqrt(p(1-p)/n) <= 0.0035,
    # so 0.015 is more than four standard errors.
    rng = random.Random(1)
    kinds = {"mask": 0, "random": 0, "same": 0}
    for _ in range(1000):
        ids, tokens = _sequence(140)
        masked = mask_tokens(
            ids,
            tokens,
            config=MaskingConfig(),
            mask_id=MASK_ID,
            random_ids=RANDOM_IDS,
            special=SPECIAL,
            rng=rng,
        )
        for p in masked.positions:
            new = masked.input_ids[p]
            kinds["mask" if new == MASK_ID else "same" if new == ids[p] else "random"] += 1
    total = sum(kinds.values())
    assert total == 20_000
    assert abs(kinds["mask"] / total - 0.8) < 0.015
    assert abs(kinds["random"] / total - 0.1) < 0.015
    assert abs(kinds["same"] / total - 0.1) < 0.015


def test_whole_word_masking_takes_whole_words():
    tokens = ["[CLS]", "un", "##believ", "##able", "story", "[SEP]"]
    assert candidate_groups(tokens, SPECIAL, whole_word=True) == [[1, 2, 3], [4]]
    assert candidate_groups(tokens, SPECIAL, whole_word=False) == [[1], [2], [3], [4]]
    for seed in range(50):
        masked = mask_tokens(
            list(range(6)),
            tokens,
            config=MaskingConfig(masked_lm_prob=0.5, whole_word_masking=True),
            mask_id=MASK_ID,
            random_ids=RANDOM_IDS,
            special=SPECIAL,
            rng=random.Random(seed),
        )
        assert masked.positions in ([1, 2, 3], [4], [1, 2, 3, 4])


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
    with pytest.raises(SchemaError, match="num_tokens differs"):
        fmt.to_table([_example(num_tokens=6)], "e.arrow")
    with pytest.raises(SchemaError, match="differ in length"):
        fmt.to_table([_example(masked_lm_ids=[])], "e.arrow")
    with pytest.raises(SchemaError, match="columns do not match"):
        examples_format(70000).read_ipc(data, "e.arrow")
