"""Validation batches: static masks kept, unmasked shards masked by each example's own tokens."""

from __future__ import annotations

import random

import numpy as np

from pretrain.collate import collate, validation_masking
from schemas.examples import examples_format

FMT = examples_format(1000)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(995)]


def unmasked_rows(count: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for uid in range(count):
        n = rng.randrange(12, 64)
        ids = [2] + [6 + rng.randrange(994) for _ in range(n - 2)] + [3]
        rows.append(
            {
                "input_ids": ids,
                "masked_lm_positions": [],
                "masked_lm_ids": [],
                "next_sentence_labels": uid % 2,
                "num_tokens_a": n // 2,
                "num_tokens": n,
                "doc_id": str(uid),
                "dupe_index": 0,
            }
        )
    return rows


def per_example_masks(batch: dict) -> list[tuple]:
    weights = batch["masked_lm_weights"].bool()
    out = []
    for row in range(len(weights)):
        real = batch["attention_mask"][row].bool()
        out.append(
            (
                tuple(batch["input_ids"][row][real].tolist()),
                tuple(batch["masked_lm_positions"][row][weights[row]].tolist()),
                tuple(batch["masked_lm_ids"][row][weights[row]].tolist()),
            )
        )
    return out


def test_masked_validation_shards_keep_their_static_masks():
    assert validation_masking({"masking": {"masked_lm_prob": 0.15}}, VOCAB) is None
    assert validation_masking({}, VOCAB) is None  # older manifests: masked


def test_unmasked_validation_shards_are_masked_by_content_whatever_the_batching():
    params = {"masking": False, "masking_settings": {"masked_lm_prob": 0.2, "max_predictions_per_seq": 8}}
    masking = validation_masking(params, VOCAB)
    assert masking is not None and masking.by_content
    assert masking.config.masked_lm_prob == 0.2 and masking.config.max_predictions_per_seq == 8
    table = FMT.to_table(unmasked_rows(40))
    whole = per_example_masks(collate(table, masking))  # no generator needed
    again = per_example_masks(collate(table, masking, np.random.default_rng(99)))
    assert whole == again
    # other batch boundaries and another order: each example keeps its masks
    order = np.random.default_rng(1).permutation(40)
    pieces = [table.take(order[lo : lo + 7]) for lo in range(0, 40, 7)]
    regrouped = [m for piece in pieces for m in per_example_masks(collate(piece, masking))]
    assert sorted(regrouped) == sorted(whole)
    counts = [len(positions) for _, positions, _ in whole]
    lengths = [row["num_tokens"] for row in unmasked_rows(40)]
    assert counts == [min(8, max(1, round(0.2 * n))) for n in lengths]
    masked_share = np.mean([tok == 4 for ids, positions, _ in whole for tok in (ids[p] for p in positions)])
    assert 0.6 < masked_share < 0.95  # about 80% [MASK]
