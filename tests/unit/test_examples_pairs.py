"""Next-sentence pairs with the reference generator's semantics, planned one document at a time."""

from __future__ import annotations

import random

import pytest

from pipelines.examples.pairs import (
    PairConfig,
    assemble,
    plan_pairs,
    seeded_rng,
    take_random_b,
    truncate_pair,
)


def _document(num_sentences: int, first_id: int = 1000) -> list[list[int]]:
    """Sentences of 5 to 24 distinct, increasing ids, so order and provenance can be checked."""
    rng = random.Random(num_sentences)
    sentences, next_id = [], first_id
    for _ in range(num_sentences):
        n = rng.randint(5, 24)
        sentences.append(list(range(next_id, next_id + n)))
        next_id += n
    return sentences


def test_actual_continuations_are_the_next_sentences_in_order():
    doc = _document(60)
    flat = [t for s in doc for t in s]
    plans = plan_pairs("d", doc, 0, PairConfig(max_seq_length=64), seeded_rng(1, "d", 0))
    continuations = [p for p in plans if not p.is_random_next]
    assert continuations and any(p.is_random_next for p in plans)
    for plan in continuations:
        pair = list(plan.tokens_a + plan.tokens_b)
        start = flat.index(pair[0])
        assert flat[start : start + len(pair)] == pair  # A then B, contiguous, in document order
    assert [p.pair_index for p in plans] == list(range(len(plans)))


def test_random_next_puts_unused_sentences_back():
    doc = _document(40)
    plans = plan_pairs(
        "d", doc, 0, PairConfig(max_seq_length=64, random_next_prob=1.0, short_seq_prob=0.0), random.Random(3)
    )
    assert all(p.is_random_next and not p.tokens_b for p in plans)
    # Every sentence starts some A exactly once or continues one: nothing is skipped.
    firsts = [p.tokens_a[0] for p in plans]
    assert firsts == sorted(firsts) and firsts[0] == doc[0][0]
    covered = {t for p in plans for t in p.tokens_a}
    assert covered == {t for s in doc for t in s}


def test_one_sentence_documents_always_take_a_random_next():
    plans = plan_pairs("d", [[1, 2, 3]], 0, PairConfig(random_next_prob=0.0), random.Random(0))
    assert len(plans) == 1 and plans[0].is_random_next and plans[0].tokens_a == (1, 2, 3)


def test_plans_are_a_function_of_identity():
    doc = _document(30)
    config = PairConfig()
    assert plan_pairs("d", doc, 2, config, seeded_rng(5, "d", 2)) == plan_pairs(
        "d", doc, 2, config, seeded_rng(5, "d", 2)
    )
    assert plan_pairs("d", doc, 2, config, seeded_rng(5, "d", 2)) != plan_pairs(
        "d", doc, 3, config, seeded_rng(5, "d", 3)
    )


def test_random_b_takes_whole_sentences_until_long_enough():
    doc = _document(10, first_id=50_000)
    tokens = take_random_b(doc, 30, random.Random(4))
    assert tokens and tokens == sorted(tokens)
    sentences_taken = [s for s in doc if s[0] in tokens]
    assert sum(len(s) for s in sentences_taken) == len(tokens)
    assert len(tokens) >= 30 or sentences_taken[-1] is doc[-1]


def test_truncation_fits_and_trims_the_longer_side():
    for seed in range(20):
        a, b = list(range(100)), list(range(1000, 1030))
        assert truncate_pair(a, b, 61, random.Random(seed))
        assert len(a) + len(b) == 61 and len(b) == 30  # only A, the longer side, was trimmed
        assert a == list(range(a[0], a[0] + len(a)))  # still contiguous
    a, b = [1], [2]
    assert not truncate_pair(a, b, 10, random.Random(0))


def test_assemble_and_config():
    assert assemble([7, 8], [9], cls_id=101, sep_id=102) == ([101, 7, 8, 102, 9, 102], 4)
    assert PairConfig(max_seq_length=128).max_num_tokens == 125
    with pytest.raises(ValueError, match="--max-seq-length.*--short-seq-prob"):
        PairConfig(max_seq_length=3, short_seq_prob=2.0)
